"""What people send, as the model gets it: photos, PDFs, office documents,
text files and voice messages (`Media.prepare`), built from `[media]`
(`build_media`)."""

from __future__ import annotations

from collections.abc import Mapping

from bot.config.media import MediaSettings
from bot.errors import ConfigError
from bot.media.audio import find_ffprobe
from bot.media.prepare import Media, Part, Prepared, Sender
from bot.media.transcription import Transcriber
from bot.metrics import Metrics
from bot.tools.results import ResultStore

__all__ = ["Media", "Part", "Prepared", "Sender", "Transcriber", "build_media"]


def build_media(
    settings: MediaSettings,
    results: ResultStore | None,
    environ: Mapping[str, str],
    metrics: Metrics | None = None,
) -> Media:
    """The `Media` `settings` ask for. `ConfigError` when the transcription
    key's environment variable is named but not set."""
    spoken = settings.transcription
    transcriber = None
    if spoken.base_url is not None:
        key = None
        if spoken.api_key_env is not None:
            key = environ.get(spoken.api_key_env, "").strip() or None
            if key is None:
                raise ConfigError(
                    f"media.transcription.api_key_env: {spoken.api_key_env} is not set (the "
                    "transcription API key; secrets come only from environment variables)"
                )
        transcriber = Transcriber(spoken, key)
    ffprobe = find_ffprobe() if transcriber is not None else None
    return Media(settings, results, transcriber, ffprobe, metrics or Metrics())
