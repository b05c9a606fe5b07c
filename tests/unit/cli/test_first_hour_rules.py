"""The rules a new user meets first, without a server: where the SDK and the CLI find the URL and
the token (an empty AIPAAS_TOKEN is no token, never the config file's), settings errors in one
line naming the variable or the option, YAML errors in one line with their position, and one
`aipaas up` per data directory."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aipaas.api.yaml_errors import yaml_error_line
from aipaas.cli import data_dir_lock
from aipaas.client import Client
from aipaas.settings import SettingsProblem, build_settings


def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"url": "http://file:1", "token": "admin-from-file"}))
    return path


def auth(client: Client) -> str | None:
    value = client.http.headers.get("Authorization")
    return str(value) if value is not None else None


def test_the_variables_win_over_the_config_file(tmp_path: Path) -> None:
    env = {"AIPAAS_CONFIG": str(config(tmp_path)), "AIPAAS_URL": "http://env:2"}
    client = Client.from_env({**env, "AIPAAS_TOKEN": "mine"})
    assert (client.url, auth(client)) == ("http://env:2", "Bearer mine")


def test_an_unset_token_variable_uses_the_config_files_token(tmp_path: Path) -> None:
    client = Client.from_env({"AIPAAS_CONFIG": str(config(tmp_path))})
    assert (client.url, auth(client)) == ("http://file:1", "Bearer admin-from-file")


def test_an_empty_token_variable_sends_no_token_and_says_why(tmp_path: Path) -> None:
    client = Client.from_env({"AIPAAS_CONFIG": str(config(tmp_path)), "AIPAAS_TOKEN": ""})
    assert auth(client) is None
    assert "AIPAAS_TOKEN is set but empty" in client.token_note


def test_client_with_no_arguments_reads_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIPAAS_CONFIG", str(config(tmp_path)))
    monkeypatch.setenv("AIPAAS_URL", "http://env:3")
    monkeypatch.setenv("AIPAAS_TOKEN", "from-env")
    client = Client()
    assert (client.url, auth(client)) == ("http://env:3", "Bearer from-env")
    # A URL given: only the token given goes with it (the configured one is for another server).
    other = Client("http://elsewhere:4")
    assert (other.url, auth(other)) == ("http://elsewhere:4", None)


def test_a_bad_variable_is_named_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SettingsProblem) as raised:
        build_settings({"data_dir": tmp_path}, {"AIPAAS_POOL_PROFILES": "gpu-a=nonesuch"})
    text = str(raised.value)
    assert "\n" not in text and text.startswith("AIPAAS_POOL_PROFILES: pool 'gpu-a'")
    assert "(got 'gpu-a=nonesuch')" in text


def test_a_bad_option_is_named_as_the_option(tmp_path: Path) -> None:
    with pytest.raises(SettingsProblem) as raised:
        build_settings({"data_dir": tmp_path, "pool_profiles": "gpu-a"}, {})
    assert str(raised.value).startswith("--pool-profiles: pool profile 'gpu-a'")


def test_a_good_pool_profiles_value_is_read(tmp_path: Path) -> None:
    built = build_settings({"data_dir": tmp_path, "pool_profiles": "gpu-a=fgd,cpu=bestfit"}, {})
    assert built.pool_profiles == {"gpu-a": "fgd", "cpu": "bestfit"}


def test_a_yaml_error_is_one_line_with_line_and_column() -> None:
    with pytest.raises(yaml.YAMLError) as raised:
        yaml.safe_load("a: 1\nb: {c: 2\nd: 3\n")
    line = yaml_error_line(raised.value)
    assert "\n" not in line
    assert "at line 3, column 2" in line and "flow mapping that starts at line 2" in line


def _try_up(data_dir: str, answers: multiprocessing.queues.Queue[str]) -> None:
    try:
        data_dir_lock.hold(Path(data_dir), verb="up")
        answers.put("held")
    except data_dir_lock.Taken as err:
        answers.put(str(err))


def test_a_second_up_on_one_data_dir_is_refused_and_servers_share(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data_dir_lock.hold(data, verb="server")  # this process serves it (shared)
    context = multiprocessing.get_context("spawn")
    answers: multiprocessing.queues.Queue[str] = context.Queue()
    other = context.Process(target=_try_up, args=(str(data), answers))
    other.start()
    other.join(60)
    assert "already serves data directory" in answers.get(timeout=5)


@pytest.mark.parametrize(
    "command",
    [["allocate", "--dry-run", "-f"], ["simulate", "cycle", "-f"]],
    ids=["allocate", "simulate"],
)
def test_a_file_that_is_not_yaml_is_said_in_one_line(tmp_path: Path, command: list[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [\n")
    aipaas = str(Path(sys.executable).parent / "aipaas")
    ran = subprocess.run([aipaas, *command, str(bad)], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), ran.stderr
    assert "line 2, column 1" in lines[0]
