"""Scheduled work: jobs bound to a session, fired exactly once per due time through the lanes."""
