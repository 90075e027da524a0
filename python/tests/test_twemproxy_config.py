"""twemproxy YAML files through the proxy crate's reader: the files nutcracker accepts are read, the
ones it refuses raise shardring.ConfigError, which lists every problem with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardring
from conftest import TESTDATA

CASES = TESTDATA / "twemproxy-config"
VERDICTS = dict(
    line.split("\t") for line in (CASES / "verdicts.tsv").read_text().splitlines() if not line.startswith("#")
)


def pools_of(path: Path) -> list:
    return [l.split(":")[0] for l in path.read_text().splitlines() if l and l[0] not in " #\t-"]


@pytest.mark.parametrize("case", sorted(VERDICTS), ids=str)
def test_files_are_read_as_nutcracker_reads_them(case: str) -> None:
    path = CASES / f"{case}.yml"
    if VERDICTS[case] == "ok":
        for pool in pools_of(path):
            config = shardring.read_twemproxy(path, pool)
            assert config.name == pool and config.servers
            if config.distribution != "random":
                ring = config.ring()
                assert len(ring) == len(config.servers)
        return
    # Duplicate pools and listen addresses are the proxy's checks, not the reader's (as for
    # `shardring lookup --config`): each pool alone still places keys.
    if case in ("duplicate-listen", "same-listen-spelt-differently"):
        return
    with pytest.raises(shardring.ConfigError) as e:
        for pool in pools_of(path) or [None]:
            shardring.read_twemproxy(path, pool)
    assert e.value.problems and isinstance(e.value, ValueError)


def test_every_problem_is_reported_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "alpha:\n"
        "  listen: nowhere\n"
        "  hash: sha1\n"
        "  colour: blue\n"
        "  distribution: spiral\n"
        "  servers:\n"
        "   - 127.0.0.1:11211:0\n"
    )
    with pytest.raises(shardring.ConfigError) as e:
        shardring.Ring.from_twemproxy(bad)
    problems = e.value.problems
    assert len(problems) >= 5, problems
    lines = {p.line for p in problems}
    assert {2, 3, 4, 5, 7} <= lines, problems
    assert all(isinstance(p, shardring.ConfigProblem) and p.message for p in problems)
    assert any(p.key == "alpha.hash" for p in problems)
    text = str(e.value)
    assert f"has {len(problems)} problems" in text
    for p in problems:
        assert str(p) in text


def test_a_yaml_syntax_error_and_pool_selection(tmp_path: Path) -> None:
    with pytest.raises(shardring.ConfigError) as e:
        shardring.read_twemproxy(CASES / "yaml-syntax-error.yml")
    assert e.value.problems[0].line > 0
    with pytest.raises(shardring.ConfigError, match="several pools"):
        shardring.read_twemproxy(CASES / "two-pools.yml")
    with pytest.raises(shardring.ConfigError, match="no pool named"):
        shardring.read_twemproxy(CASES / "minimal.yml", "nope")
    with pytest.raises(FileNotFoundError):
        shardring.read_twemproxy(tmp_path / "missing.yml")


def test_random_distribution_places_nothing(tmp_path: Path) -> None:
    path = tmp_path / "random.yml"
    path.write_text("a:\n  listen: 127.0.0.1:22121\n  distribution: random\n  servers:\n   - 127.0.0.1:11211:1\n")
    assert shardring.read_twemproxy(path).distribution == "random"
    with pytest.raises(ValueError, match="random"):
        shardring.Ring.from_twemproxy(path)


def test_pool_attributes_and_server_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.yml"
    path.write_text(
        "a:\n  listen: 127.0.0.1:22121\n  hash: md5\n  hash_tag: \"{}\"\n  servers:\n"
        "   - 127.0.0.1:11211:2 cache-a\n   - 127.0.0.1:11212:1\n   - /tmp/mc.sock:1\n"
    )
    config = shardring.read_twemproxy(path)
    assert (config.hash, config.hash_tag, config.distribution, config.redis) == ("md5", "{}", "ketama", False)
    assert config.servers == [
        ("cache-a", "127.0.0.1", 11211, 2), ("127.0.0.1:11212", "127.0.0.1", 11212, 1),
        ("/tmp/mc.sock", "/tmp/mc.sock", 0, 1),
    ]
    ring = config.ring()
    same = shardring.Ring.from_twemproxy_servers(
        ["127.0.0.1:11211:2 cache-a", "127.0.0.1:11212:1", "/tmp/mc.sock:1"], hash="md5", hash_tag="{}"
    )
    keys = [f"{{user{i % 50}}}:{i}" for i in range(5000)]
    assert ring.lookup_many(keys) == same.lookup_many(keys)
    # Hash tags: keys with the same tag live together.
    assert len(set(ring.lookup_many([f"{{user7}}:{i}" for i in range(100)]))) == 1
    with pytest.raises(ValueError, match="two characters"):
        shardring.Ring.from_twemproxy_servers(["127.0.0.1:11211:1"], hash_tag="{")
    with pytest.raises(ValueError, match="format"):
        shardring.Ring.from_twemproxy_servers(["127.0.0.1"])
