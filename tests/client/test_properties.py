"""Properties files read as java.util.Properties reads them."""

import pytest

from moldau.properties import PropertiesError, load_properties


def load(tmp_path, content: bytes) -> dict[str, str]:
    path = tmp_path / "x.properties"
    path.write_bytes(content)
    return load_properties(str(path))


def test_separators_comments_and_whitespace(tmp_path):
    assert load(tmp_path, b"# c\n! c\n  a=1\nb : 2\nc 3\nd\t=\t4\ne\nf=\ng = x y \n") == {
        "a": "1", "b": "2", "c": "3", "d": "4", "e": "", "f": "", "g": "x y "}


def test_continuation_lines(tmp_path):
    assert load(tmp_path, b"list=a,\\\n   b,\\\n\t# not a comment\nnext=1\n") == {
        "list": "a,b,# not a comment", "next": "1"}
    # An even number of backslashes is an escaped backslash, not a continuation.
    assert load(tmp_path, b"path=c:\\\\\nnext=1\r\nlast=2\rend=3") == {
        "path": "c:\\", "next": "1", "last": "2", "end": "3"}
    # A comment line does not continue.
    assert load(tmp_path, b"# comment \\\nkey=v\n") == {"key": "v"}


def test_escapes_in_keys_and_values(tmp_path):
    assert load(tmp_path, b"a\\=b\\ c=\\t\\n\\q\\u00e9\\u20AC\nemoji=\\uD83D\\uDE00\n") == {
        "a=b c": "\t\nq\u00e9\u20ac", "emoji": "\U0001f600"}


def test_bytes_are_iso_8859_1(tmp_path):
    assert load(tmp_path, b"# \xff\xfe\nrack=r\xe9gion\xff\n") == {"rack": "r\u00e9gion\u00ff"}


@pytest.mark.parametrize("content,line", [
    (b"a=1\n\n#c\nb=\\u12G4\n", 4),
    (b"a=\\u00", 1),
    (b"a=1\nb=x,\\\n  y\\u\n", 2),
])
def test_malformed_unicode_escape_names_file_and_line(tmp_path, content, line):
    with pytest.raises(PropertiesError, match=rf"x\.properties:{line}: Malformed \\uxxxx"):
        load(tmp_path, content)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(PropertiesError, match="Cannot read .*nope: No such file"):
        load_properties(str(tmp_path / "nope"))
    with pytest.raises(PropertiesError, match="Is a directory"):
        load_properties(str(tmp_path))
