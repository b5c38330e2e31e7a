"""gpulease: a self-hostable GPU compute rental platform."""

__version__ = "0.1.0"
