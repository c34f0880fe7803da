"""What a session writes while it runs: the trace, the live view and panel, the report, text for people. The
readers of a trace (replay, postmortem, watch, notify) are agent/readers/."""
