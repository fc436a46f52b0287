"""User-facing errors. Each carries one readable line; the CLIs print it without a traceback."""


class VflError(Exception):
    """Base class for errors caused by input the user can fix (exit code 2 in the CLIs)."""


class DataError(VflError):
    """A party directory, data file or data set is missing, corrupt or inconsistent."""


class ConfigError(VflError):
    """A configuration value is invalid or two configurations disagree."""


class ProtocolError(VflError):
    """A message breaks the federation protocol: wrong round, shape, dtype, digest or party."""


class StaleRoundError(ProtocolError):
    """A message refers to a round that is not the party's current one."""
