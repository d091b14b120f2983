"""stepcast.json_files: one reader of JSON files, whose every failure is one line naming the file and what it was
expected to be."""
from __future__ import annotations

import pytest

from stepcast.errors import InputError, MissingFileError
from stepcast.json_files import read_json


def test_a_file_is_read_and_its_fields_checked(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"cells": [], "seeds": [0]}')
    assert read_json(path, "a results file", ("cells", "seeds")) == {"cells": [], "seeds": [0]}
    with pytest.raises(InputError, match=r"r\.json: no field 'splits' \(expected a results file\)$"):
        read_json(path, "a results file", ("cells", "splits"))


def test_a_missing_or_broken_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(MissingFileError, match=r"nope\.json: missing \(expected a bundle file\)$"):
        read_json(tmp_path / "nope.json", "a bundle file")
    broken = tmp_path / "b.json"
    broken.write_text('{"a": ')
    with pytest.raises(InputError, match=r"b\.json: not valid JSON \(line 1: .*; expected a bundle file\)$"):
        read_json(broken, "a bundle file")
    listed = tmp_path / "l.json"
    listed.write_text("[1, 2]")
    with pytest.raises(InputError, match=r"l\.json: no field 'cells'"):
        read_json(listed, "a results file", ("cells",))
