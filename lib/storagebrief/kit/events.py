"""A child's events on a pipe: moved down to core/events.py (core's long-lived jobs drain them);
studies and kit keep importing them from here."""
from ..core.events import EOF_EVENT, drain_events  # noqa: F401
