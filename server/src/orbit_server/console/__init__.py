"""The operator console: server-rendered pages at ``/console`` on the server's own listener
(decision 0026). It is an adapter like the HTTP API: it calls the same services, and every
action it offers is audited like the API's."""
