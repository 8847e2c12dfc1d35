"""sage.outputs: every whole file is written atomically (temp file, fsync, rename), a failed write
leaves the previous file and no temporary file, and an OSError on an output is one line (issue 54, items 5, 6)."""
from __future__ import annotations

import errno
import resource

import pandas as pd
import pytest

from sage.data.table_sink import TableSink
from sage.errors import SageInputError
from sage.outputs import OutputError, output_error, write_text, write_whole


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name)


def test_a_write_failing_part_way_leaves_the_previous_file_and_no_temp_file(tmp_path):
    """A full disk part way through a file (the writer has written some bytes, then ENOSPC): the
    previous file is intact, no `*.tmp<pid>` is left, and the error names the file and the fix."""
    path = tmp_path / "summary.json"
    write_text(path, '{"old": true}\n')

    def full_disk(tmp):
        with open(tmp, "w") as fh:
            fh.write('{"new": ')
            fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp))

    with pytest.raises(OutputError) as err:
        write_whole(path, full_disk)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "No space left on device" in message and "disk is full" in message
    assert "\n" not in message and isinstance(err.value, SageInputError)
    assert path.read_text() == '{"old": true}\n'
    assert _leftovers(tmp_path) == []


def test_any_exception_in_the_writer_removes_the_temp_file(tmp_path):
    path = tmp_path / "t.csv"

    def broken(tmp):
        tmp.write_text("half")
        raise ValueError("a bug in the writer")

    with pytest.raises(ValueError):
        write_whole(path, broken)
    assert not path.exists() and _leftovers(tmp_path) == []


def test_a_real_file_size_limit_part_way_through_summary_json_keeps_the_previous_one(tmp_path):
    """A real failing write (the process' file-size limit, EFBIG, as a full disk would fail it)
    while `ScoreResult.write` writes summary.json: the summary of the previous run stays whole."""
    from sage.scoring import score_responses

    df = pd.DataFrame({"question_id": ["q"] * 3 + ["r"] * 3,
                       "answer": ["yes it is", "yes it is fine", "yes", "no", "no it is not", "never"]})
    result = score_responses(df, metrics=("sge", "bleu"), sge_edges=("bleu",), progress=False)
    result.write(tmp_path)
    before = (tmp_path / "summary.json").read_bytes()
    limit = (tmp_path / "questions.csv").stat().st_size + 1  # questions.csv is written first and fits
    assert len(before) > limit
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))  # Python ignores SIGXFSZ: writes fail with EFBIG
    try:
        with pytest.raises(OutputError, match=r"summary\.json: cannot write it \(File too large\)"):
            result.write(tmp_path)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert (tmp_path / "summary.json").read_bytes() == before
    assert _leftovers(tmp_path) == []


def test_a_table_sink_that_fails_part_way_leaves_no_temp_file(tmp_path):
    path = tmp_path / "responses.csv"
    path.write_text("question_id,answer\nold,table\n")
    sink = TableSink(path)
    sink.append(pd.DataFrame({"question_id": ["q"], "answer": ["a"]}))
    assert _leftovers(tmp_path)  # written under the temporary name until close
    sink.discard()
    assert _leftovers(tmp_path) == [] and path.read_text() == "question_id,answer\nold,table\n"


@pytest.mark.parametrize("code, hint", [
    (errno.EACCES, "not writable"), (errno.EROFS, "read-only file system"), (errno.ENOTDIR, "is a file"),
    (errno.ENOSPC, "disk is full"), (errno.ENAMETOOLONG, "too long"), (errno.EFBIG, "ulimit -f"),
])
def test_each_output_fault_is_one_line_with_its_fix(tmp_path, code, hint):
    message = str(output_error(tmp_path / "out", OSError(code, "reason")))
    assert message.startswith(f"{tmp_path / 'out'}: cannot write it (reason); ") and hint in message
    assert "\n" not in message
