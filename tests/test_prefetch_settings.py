"""Which settings keep a run's raw step from adopting the fetches its command started ahead
(pipeline/raw/prefetch.py): those a fetch reads or writes by, never one it does not use."""

from pathlib import Path

from pydantic import SecretStr

from pipeline.raw.prefetch import _fetch_settings_differing
from pipeline.settings import load_settings


def test_only_the_settings_a_fetch_uses_keep_it_from_being_adopted(tmp_path: Path) -> None:
    ahead = load_settings(data_dir=tmp_path, base_url="http://127.0.0.1:1", app_secret="s")
    url = "postgresql://dagster:secret@127.0.0.1:5432/dagster"
    with_url = ahead.model_copy(update={"dagster_postgres_url": SecretStr(url)})
    # what the instance setup does to the URL between the fetches' start and the run's step
    with_driver = ahead.model_copy(
        update={"dagster_postgres_url": SecretStr(url.replace("postgresql", "postgresql+psycopg2", 1))}
    )
    assert _fetch_settings_differing(with_driver, with_url) == []
    assert _fetch_settings_differing(ahead.model_copy(update={"log_level": "DEBUG"}), ahead) == []

    assert _fetch_settings_differing(ahead.model_copy(update={"page_size": 7}), ahead) == ["page_size"]
    assert _fetch_settings_differing(ahead.model_copy(update={"lookback": ahead.lookback * 2}), ahead) == [
        "lookback"
    ]  # read by the client's plan and the sync's window alike, named once
    assert _fetch_settings_differing(ahead.model_copy(update={"lake_url": str(tmp_path / "other")}), ahead) == [
        "lake_url"
    ]
    named = _fetch_settings_differing(ahead.model_copy(update={"app_secret": SecretStr("other")}), ahead)
    assert named == ["app_secret"]  # named, its value never shown
