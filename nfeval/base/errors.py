"""The one error contract of every command.

Bad input from the user (a missing or malformed file, a bad flag or config value, a checkpoint that
cannot be trusted or read) raises a ``UserError`` subclass whose message names the file, the line or
field, and what was expected. The CLI prints such an error as one line and exits with status 2; any
other exception is a bug and shows its traceback (``NFEVAL_TRACEBACK=1`` shows it for ``UserError``
too). Each kind also subclasses the builtin it refines, so ``except ValueError`` keeps working.
"""

from __future__ import annotations

import errno

# What the filesystem says about a user's path (full, over a size limit, read-only, not permitted, a file
# in the way)
ENVIRONMENT_ERRNOS = {
    errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM,
    errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG,
}  # fmt: skip


class UserError(Exception):
    """Bad input from the user: printed as one line, without a traceback, exit status 2."""


class ConfigError(UserError, ValueError):
    """A config field, preset or command-line value is unknown, of the wrong type or out of range."""


class DataError(UserError, ValueError):
    """A data or results file is malformed; the message names the file, the line and the field."""


class MissingDataError(UserError, FileNotFoundError):
    """A file or folder the command needs does not exist; the message says what was expected there."""


class OutputError(UserError, OSError):
    """An output file or folder cannot be written: read-only or full filesystem, a file in the way."""


class CheckpointError(UserError, ValueError):
    """A checkpoint is corrupt, truncated, untrusted or does not match its recorded fingerprint."""


class DeviceMemoryError(UserError, MemoryError):
    """A batch (or the model) does not fit in the device's memory; the message names the batch, the
    device and the largest batch that fits."""


def environment_error(error: OSError) -> OutputError | None:
    """Returns the one-line OutputError for an OSError the filesystem raised about a user's path (its
    errno in ENVIRONMENT_ERRNOS), naming the path when the error carries one; None for any other."""
    if error.errno not in ENVIRONMENT_ERRNOS:
        return None
    where = f"{error.filename}: " if error.filename else ""
    return OutputError(f"{where}{error.strerror or error}")


def hub_unreachable(what: str, error: BaseException, instead: str) -> MissingDataError:
    """Returns the one error every command raises when a Hugging Face Hub dataset cannot be loaded.

    ``what`` names the dataset (and the task), ``instead`` the flag that reads local files instead.
    """
    return MissingDataError(
        f"{what}: could not load the dataset from the Hugging Face Hub ({type(error).__name__}: "
        f"{str(error).strip()[:300]}); {instead}"
    )
