"""Governance (SPEC G1, G2, G5): tenants, environments, API keys, roles and the audit log."""
