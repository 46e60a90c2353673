"""Pulse: durable tasks, attempts, leases, retries, quotas, gates and schedules."""
