"""What can go wrong with a file someone sent."""

from __future__ import annotations


class Unreadable(Exception):
    """The file cannot be read as what it claims to be (corrupt, encrypted, not
    that format at all). The message says why, in words for the user and the
    model ("it is password-protected")."""


class TranscriptionFailed(Exception):
    """The transcription service did not transcribe (down, refused, garbage):
    the message is kept for an operator."""
