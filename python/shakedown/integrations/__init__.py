"""Optional integrations with serving frameworks (each behind its own extra)."""
