"""Every chapter states its exercise contract before the exercise (issue 26 item 7), from one function
(flashtutor/contract.py) that reads the grader's own rules and the results files: what it says, and that each
chapter's stored output is what the function prints today (a rule or a results file changed without the notebook
being re-run fails here)."""
import json
import re
from pathlib import Path

import pytest

from flashtutor.chapters import CHAPTERS, ROOT
from flashtutor.contract import contract


def test_the_contract_says_the_rule_the_times_and_the_commands():
    text = contract("04")
    assert "chapters/04_triton_online_softmax/attention.py" in text
    assert "at most 2.2× SDPA's GPU time per call" in text                      # the rule, from chapters.py
    assert re.search(r"grading takes: \d+ s on an H100 for the solution", text)  # from a grade report
    assert re.search(r"\d+ s with warm caches.*--sets cpu \(interpreted\)", text.replace("\n", " "))
    assert "flashtutor grade 04 --sets seed --no-timing" in text and "flashtutor grade 04 --sets cpu" in text


def test_grading_times_come_from_the_files(tmp_path):
    """With no results files the contract says nothing about time rather than something made up."""
    text = contract("02", root=tmp_path)
    assert "grading takes" not in text and "with warm caches" not in text
    (tmp_path / "results").mkdir()
    (tmp_path / "results/cpu-grading-x.json").write_text(json.dumps({
        "machine": {"cores": 8, "cpu": "Test CPU"}, "runs": [{"caches": "warm", "gradings": [
            {"chapter": "02", "wall_s": 12.4, "execution": "emulated"}]}]}))
    assert "12 s with warm caches, with --sets cpu (emulated), on a 8-core Test CPU" in contract("02", root=tmp_path)


def _contract_cells():
    for path in sorted(ROOT.glob("chapters/*/*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            m = re.search(r'print\(contract\("(\d\d)"\)\)', "".join(cell["source"]))
            if cell["cell_type"] == "code" and m:
                yield pytest.param(path, i, m.group(1), id=f"{path.parent.name}-cell{i}")


@pytest.mark.parametrize("path,index,key", list(_contract_cells()))
def test_each_chapter_prints_todays_contract(path, index, key):
    cell = json.loads(path.read_text())["cells"][index]
    stored = "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
    assert stored == contract(key) + "\n", f"{path.name}: re-run the contract cell"


def test_every_graded_chapter_has_its_contract_cell():
    keys = {key for _, _, key in (p.values for p in _contract_cells())}
    assert keys == set(CHAPTERS), keys
