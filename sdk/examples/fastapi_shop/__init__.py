"""A FastAPI shop whose order confirmations go through Orbit's transactional outbox; see
docs/recipes/fastapi.md. Run from ``sdk/examples`` (or your project's root)::

    uvicorn --factory fastapi_shop.app:create_app    # the web app (and, by default, the relay)
    orbit-worker fastapi_shop.worker                 # the worker, beside it
"""
