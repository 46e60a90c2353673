"""HTTP adapter: Litestar routes → application services, wire models, the error contract."""
