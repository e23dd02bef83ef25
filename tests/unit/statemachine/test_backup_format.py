"""The backup file format (statemachine/backup_format.py) and its checks on restore
(node/restore.py, node/raft/seed.py): DESIGN.md section 6.1."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

import tsched.statemachine.backup_format as fmt
from tsched.node.raft.seed import check_section, seed
from tsched.node.raft.snapshot_file import publish_snapshot, read_snapshot, write_snapshot
from tsched.node.restore import RestoreRefused, read_head


def _head(sections: list[int], cluster: str = "prod") -> dict:
    return {"cluster": cluster, "shards": len(sections), "created_at": "2026-01-02T03:04:05.000Z",
            "created_ms": 1_767_323_045_000,
            "sections": [{"shard": s, "bytes": n, "raft_index": 10 + s, "raft_term": 2}
                         for s, n in enumerate(sections)]}


def _write(path: Path, head: dict, sections: list[bytes]) -> bytes:
    h = fmt.new_hash()
    body = fmt.encode_prefix(head) + b"".join(sections)
    h.update(body)
    raw = body + h.digest()
    path.write_bytes(raw)
    return raw


def test_a_written_file_reads_back_with_each_sections_offset(tmp_path):
    sections = [b"a" * 5, b"bb" * 7, b""]
    _write(tmp_path / "b", _head([len(s) for s in sections]), sections)
    head, offsets = read_head(str(tmp_path / "b"))
    assert head == _head([5, 14, 0])
    raw = (tmp_path / "b").read_bytes()
    assert [raw[o:o + len(s)] for o, s in zip(offsets, sections)] == sections


@pytest.mark.parametrize("at", [0, 9, 20, -40, -1])
def test_any_flipped_byte_is_refused(tmp_path, at):
    raw = bytearray(_write(tmp_path / "b", _head([64]), [bytes(range(64))]))
    raw[at] ^= 0x10
    (tmp_path / "b").write_bytes(bytes(raw))
    with pytest.raises(RestoreRefused) as e:
        read_head(str(tmp_path / "b"))
    assert any(w in str(e.value) for w in ("checksum mismatch", "not a tsched backup",
                                           "format version", "head"))


def test_a_flipped_content_byte_says_checksum_mismatch(tmp_path):
    raw = bytearray(_write(tmp_path / "b", _head([64]), [bytes(64)]))
    raw[-50] ^= 1
    (tmp_path / "b").write_bytes(bytes(raw))
    with pytest.raises(RestoreRefused, match="checksum mismatch"):
        read_head(str(tmp_path / "b"))


def test_unknown_version_truncation_and_other_files_are_refused(tmp_path):
    raw = _write(tmp_path / "b", _head([8]), [bytes(8)])
    (tmp_path / "v").write_bytes(raw[:8] + struct.pack(">I", 2) + raw[12:])
    with pytest.raises(RestoreRefused, match="format version 2 is unknown"):
        read_head(str(tmp_path / "v"))
    (tmp_path / "t").write_bytes(raw[:-5])
    with pytest.raises(RestoreRefused, match="checksum mismatch|truncated"):
        read_head(str(tmp_path / "t"))
    (tmp_path / "x").write_bytes(b"TSCHSNP2" + bytes(40))
    with pytest.raises(RestoreRefused, match="not a tsched backup"):
        read_head(str(tmp_path / "x"))
    with pytest.raises(RestoreRefused, match="cannot read"):
        read_head(str(tmp_path / "missing"))


@pytest.mark.parametrize("change", [
    {"shards": 2}, {"cluster": 5}, {"created_ms": "now"}, {"extra": 1},
    {"sections": [{"shard": 1, "bytes": 1, "raft_index": 1, "raft_term": 1}]},
    {"sections": [{"shard": 0, "bytes": -1, "raft_index": 1, "raft_term": 1}]},
    {"sections": [{"shard": 0, "bytes": True, "raft_index": 1, "raft_term": 1}]},
])
def test_a_head_of_the_wrong_shape_is_refused(change):
    with pytest.raises(fmt.BackupFormatError) as e:
        fmt.encode_prefix({**_head([1]), **change})
    assert e.value.reason == "head"


def test_a_section_seeds_a_snapshot_at_its_index_with_term_zero(tmp_path):
    src = tmp_path / "leader" / "snapshot.bin"
    src.parent.mkdir()
    write_snapshot(src, [[b"\x00cmd", 41, 7], [b"\x00cmd", 40, 7], ["a:1"]], b"state!")
    publish_snapshot(src)
    index, state = check_section(src.read_bytes())
    assert (index, state) == (41, b"state!")
    path = seed(tmp_path / "fresh" / "n1", index, state, ["h:2", "h:1"])
    raft, got = read_snapshot(path)
    assert got == b"state!"
    assert [list(raft[0][1:]), list(raft[1][1:]), list(raft[2])] == [[41, 0], [40, 0],
                                                                     ["h:1", "h:2"]]
    damaged = bytearray(src.read_bytes())
    damaged[-1] ^= 1
    with pytest.raises(ValueError, match="damaged"):
        check_section(bytes(damaged))
