"""The sComponent file service, through FIT, against a real sMonitor process."""

import errno
import os

import pytest

from fit_rpc import Op


@pytest.fixture
def storage_root(rack):
    return next(c for c in rack.spec.components if c["id"] == "s0")["root"]


def s(client, op, data=b"", **args):
    return client.call_args("s0", op, args, data)


def test_create_write_read_stat(client):
    st, _ = s(client, Op.S_OPEN, path="a.txt", create=True, truncate=True)
    assert (st["size"], st["type"]) == (0, "file")
    assert s(client, Op.S_WRITE, b"hello world", path="a.txt", offset=0)[0] == {"written": 11}
    assert s(client, Op.S_WRITE, b"WORLD", path="a.txt", offset=6)[0]["written"] == 5
    _, data = s(client, Op.S_READ, path="a.txt", offset=0, length=100)
    assert bytes(data) == b"hello WORLD"
    _, data = s(client, Op.S_READ, path="a.txt", offset=6, length=3)
    assert bytes(data) == b"WOR"
    assert s(client, Op.S_STAT, path="a.txt")[0]["size"] == 11


def test_large_file_round_trip(client):
    blob = os.urandom(1_500_000)
    s(client, Op.S_OPEN, path="big.bin", create=True, truncate=True)
    s(client, Op.S_WRITE, blob, path="big.bin", offset=0)
    _, data = s(client, Op.S_READ, path="big.bin", offset=0, length=len(blob))
    assert bytes(data) == blob


def test_write_past_end_and_truncate(client):
    s(client, Op.S_OPEN, path="t.bin", create=True, truncate=True)
    s(client, Op.S_WRITE, b"x", path="t.bin", offset=9)
    assert bytes(s(client, Op.S_READ, path="t.bin", offset=0, length=10)[1]) == b"\0" * 9 + b"x"
    s(client, Op.S_TRUNCATE, path="t.bin", length=3)
    assert s(client, Op.S_STAT, path="t.bin")[0]["size"] == 3


def test_directories_listdir_rename_unlink(client, storage_root):
    s(client, Op.S_MKDIR, path="d")
    s(client, Op.S_MKDIR, path="d/e")
    s(client, Op.S_OPEN, path="d/f", create=True)
    assert s(client, Op.S_LISTDIR, path="d")[0]["entries"] == ["e", "f"]
    s(client, Op.S_RENAME, src="d/f", dst="d/g")
    assert s(client, Op.S_LISTDIR, path="d")[0]["entries"] == ["e", "g"]
    assert os.path.exists(os.path.join(storage_root, "d", "g"))
    with pytest.raises(OSError) as info:
        s(client, Op.S_RMDIR, path="d")
    assert info.value.errno == errno.ENOTEMPTY
    s(client, Op.S_UNLINK, path="d/g")
    s(client, Op.S_RMDIR, path="d/e")
    s(client, Op.S_RMDIR, path="d")
    assert "d" not in s(client, Op.S_LISTDIR, path="")[0]["entries"]


@pytest.mark.parametrize("op, args, code, exc", [
    (Op.S_READ, {"path": "nope", "offset": 0, "length": 1}, errno.ENOENT, FileNotFoundError),
    (Op.S_WRITE, {"path": "nope", "offset": 0}, errno.ENOENT, FileNotFoundError),
    (Op.S_MKDIR, {"path": "dup"}, errno.EEXIST, FileExistsError),
    (Op.S_LISTDIR, {"path": "plain"}, errno.ENOTDIR, NotADirectoryError),
    (Op.S_READ, {"path": "plain", "offset": -1, "length": 1}, errno.EINVAL, OSError),
    (Op.S_READ, {"path": "plain", "offset": 0, "length": 1 << 30}, errno.EINVAL, OSError),
    (Op.S_STAT, {"path": 7}, errno.EINVAL, OSError),
    (Op.S_OPEN, {"path": "plain", "create": True, "exclusive": True}, errno.EEXIST,
     FileExistsError),
])
def test_errors_carry_linux_errno(client, op, args, code, exc):
    s(client, Op.S_OPEN, path="plain", create=True)
    if op == Op.S_MKDIR:
        s(client, Op.S_MKDIR, path="dup")
    with pytest.raises(exc) as info:
        client.call_args("s0", op, args)
    assert info.value.errno == code
    if op == Op.S_MKDIR:
        s(client, Op.S_RMDIR, path="dup")


def test_error_message_shows_client_path_not_host_path(client, storage_root):
    with pytest.raises(FileNotFoundError) as info:
        s(client, Op.S_STAT, path="missing/file")
    assert "missing/file" in str(info.value)
    assert storage_root not in str(info.value)


@pytest.fixture
def outside(tmp_path):
    """A directory outside the storage root with a file that must never change."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    return tmp_path


@pytest.mark.parametrize("path", ["../victim.txt", "a/../../victim.txt", "/etc/passwd",
                                  "..", "x\0y"])
@pytest.mark.parametrize("op", [Op.S_READ, Op.S_WRITE, Op.S_STAT, Op.S_UNLINK, Op.S_TRUNCATE,
                                Op.S_OPEN, Op.S_LISTDIR, Op.S_MKDIR, Op.S_RMDIR])
def test_paths_escaping_the_root_are_refused(client, path, op):
    args = {"path": path, "offset": 0, "length": 1, "create": True}
    with pytest.raises(PermissionError) as info:
        client.call_args("s0", op, args, b"evil")
    assert info.value.errno == errno.EACCES


def test_symlinks_out_of_the_root_are_refused(client, storage_root, outside):
    os.symlink(outside, os.path.join(storage_root, "link-dir"))
    os.symlink(outside / "victim.txt", os.path.join(storage_root, "link-file"))
    try:
        for op, args in [
            (Op.S_READ, {"path": "link-file", "offset": 0, "length": 8}),
            (Op.S_WRITE, {"path": "link-file", "offset": 0}),
            (Op.S_TRUNCATE, {"path": "link-file", "length": 0}),
            (Op.S_OPEN, {"path": "link-file", "truncate": True}),
            (Op.S_READ, {"path": "link-dir/victim.txt", "offset": 0, "length": 8}),
            (Op.S_LISTDIR, {"path": "link-dir"}),
            (Op.S_UNLINK, {"path": "link-dir/victim.txt"}),
            (Op.S_MKDIR, {"path": "link-dir/new"}),
            (Op.S_RENAME, {"src": "link-dir/victim.txt", "dst": "stolen"}),
            (Op.S_RENAME, {"src": "plain2", "dst": "link-dir/planted"}),
        ]:
            with pytest.raises(PermissionError):
                client.call_args("s0", op, args, b"evil")
    finally:
        os.unlink(os.path.join(storage_root, "link-dir"))
        os.unlink(os.path.join(storage_root, "link-file"))
    assert (outside / "victim.txt").read_text() == "precious"
    assert sorted(os.listdir(outside)) == ["victim.txt"]


def test_symlink_inside_the_root_is_followed(client, storage_root):
    s(client, Op.S_OPEN, path="real.txt", create=True, truncate=True)
    s(client, Op.S_WRITE, b"inside", path="real.txt", offset=0)
    os.symlink("real.txt", os.path.join(storage_root, "alias.txt"))
    try:
        assert bytes(s(client, Op.S_READ, path="alias.txt", offset=0, length=6)[1]) == b"inside"
    finally:
        os.unlink(os.path.join(storage_root, "alias.txt"))


def test_the_root_itself_cannot_be_removed(client):
    for op in (Op.S_RMDIR, Op.S_UNLINK):
        with pytest.raises(PermissionError):
            client.call_args("s0", op, {"path": ""})
