"""`[media]` and `[media.transcription]`: every key documented in the example
file, and bad values refused with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import MediaSettings, TranscriptionSettings, load_settings
from bot.errors import ConfigError
from tests.paths import REPO_ROOT


def test_the_example_documents_every_media_key_with_its_default() -> None:
    text = (REPO_ROOT / "config.example.toml").read_text()
    media = text[text.index("[media]") :]
    for key in MediaSettings.model_fields:
        if key != "transcription":
            assert f"\n{key} =" in media, key
    spoken = media[media.index("[media.transcription]") :]
    for key in TranscriptionSettings.model_fields:
        assert f"\n{key} =" in spoken or f"\n# {key} =" in spoken, key
    settings = load_settings(REPO_ROOT / "config.example.toml", environ={})
    assert settings.media == MediaSettings()
    assert settings.media.transcription.base_url is None  # no endpoint unless one is set


def test_a_trailing_slash_is_dropped_and_blank_means_unset(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[media.transcription]\nbase_url = "http://127.0.0.1:8000/v1/"\n')
    assert load_settings(path, environ={}).media.transcription.base_url == (
        "http://127.0.0.1:8000/v1"
    )
    path.write_text('[media.transcription]\nbase_url = " "\n')
    assert load_settings(path, environ={}).media.transcription.base_url is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[media]\nimage_max_px = 100\n",
            "config.toml: media.image_max_px: Input should be greater than or equal to 200",
        ),
        ("[media]\nmax_files = 0\n", "config.toml: media.max_files:"),
        ("[media]\ndocument_max_chars = 10\n", "config.toml: media.document_max_chars:"),
        ("[media]\nmax_photos = 3\n", "config.toml: media.max_photos: unknown setting"),
        (
            '[media.transcription]\nbase_url = "ftp://example.org/v1"\n',
            "media.transcription.base_url: must be an http:// or https:// URL",
        ),
        (
            '[media.transcription]\napi_key_env = "sk-live-0123456789"\n',
            "media.transcription.api_key_env: must be the name of an environment variable "
            "(not the key itself)",
        ),
        (
            '[media.transcription]\napi_key = "sk-live-0123456789"\n',
            "media.transcription.api_key: secrets are not read from the config file",
        ),
        ('[media.transcription]\nlanguage = "English"\n', "media.transcription.language:"),
        ("[media.transcription]\nmax_seconds = 0\n", "media.transcription.max_seconds:"),
    ],
)
def test_bad_values_name_the_key_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert "sk-live-0123456789" not in str(info.value)
