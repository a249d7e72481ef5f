"""The one error type for bad user input: its message is one line (what is wrong, what to do), and the
entry points print it without a traceback. A leaf: every layer raises it."""


class ConfigError(ValueError):
    """Bad user input: reported as one line, exit code 2, no traceback."""
