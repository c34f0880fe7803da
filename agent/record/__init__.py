"""A session's record: the trace written during it, the live view, the report, replay and the postmortem."""
