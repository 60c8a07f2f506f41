"""GLUE readers: every task's distribution TSV format, and bad input named by file and line."""

from pathlib import Path

import datasets
import pytest

from nfeval.glue import data as glue_data

REAL_GLUE = Path(__file__).resolve().parents[3] / "shared" / "data" / "glue"

# Minimal files in each task's GLUE distribution layout: (folder, file) -> text.
FILES = {
    ("CoLA", "train.tsv"): "gj04\t1\t\tThe cat sat.\ngj04\t0\t*\tCat the sat.\n",
    (
        "CoLA",
        "dev.tsv",
    ): "gj04\t1\t\tA dog ran.\nw_80\t0\t*\tRan dog a.",  # no final newline, as the real file
    ("SST-2", "train.tsv"): 'sentence\tlabel\ngood movie \t1\nbad "film" \t0\n',
    ("SST-2", "dev.tsv"): "sentence\tlabel\r\nfine \t1\r\n",  # CRLF
    (
        "MRPC",
        "train.tsv",
    ): '\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA b.\t"A" b.\n0\t3\t4\tC.\tD.\n',
    ("MRPC", "dev.tsv"): "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t5\t6\tE.\tF.\n",
    (
        "STS-B",
        "train.tsv",
    ): "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane.\tAn airplane.\t5.000\n",
    (
        "STS-B",
        "dev.tsv",
    ): "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    "0\tmain-news\tMSRvid\t2012test\t0000\tnone\tnone\tA man.\tA dog.\t0.250\n",
    (
        "QQP",
        "train.tsv",
    ): "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tWhy?\tHow?\t0\n1\t3\t4\tWho?\tWho "
    "is?\t1\n",
    ("QQP", "dev.tsv"): "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n2\t5\t6\tWhat?\tWhat is?\t1\n",
    ("QNLI", "train.tsv"): "index\tquestion\tsentence\tlabel\n0\tWho?\tHe did.\tentailment\n",
    ("QNLI", "dev.tsv"): "index\tquestion\tsentence\tlabel\n0\tWhen?\tNobody.\tnot_entailment\n",
    (
        "RTE",
        "train.tsv",
    ): "index\tsentence1\tsentence2\tlabel\n0\tP.\tH.\tnot_entailment\n1\tP2.\tH2.\tentailment\n",
    ("RTE", "dev.tsv"): "index\tsentence1\tsentence2\tlabel\n0\tP3.\tH3.\tentailment\n",
}
MNLI_TRAIN_HEAD = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n"
)
MNLI_DEV_HEAD = MNLI_TRAIN_HEAD.replace(
    "label1\tgold_label", "label1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"
)
FILES[("MNLI", "train.tsv")] = (
    MNLI_TRAIN_HEAD + "0\t1\t1e\tgov\t(\t(\t(\t(\tPremise.\tHypo.\tneutral\tneutral\n"
)
FILES[("MNLI", "dev_matched.tsv")] = (
    MNLI_DEV_HEAD + "0\t1\t1e\tgov\t(\t(\t(\t(\tP.\tH.\tneutral\ta\tb\tc\td\tcontradiction\n"
)
FILES[("MNLI", "dev_mismatched.tsv")] = (
    MNLI_DEV_HEAD + "0\t1\t1e\tgov\t(\t(\t(\t(\tP.\tH.\ta\tb\tc\td\te\tentailment\n"
)


def write_glue(root: Path, files=FILES) -> Path:
    for (folder, name), text in files.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_bytes(text.encode("utf-8"))
    return root


def test_every_task_reads_its_distribution_format(tmp_path):
    root = write_glue(tmp_path)
    got = {t: glue_data.load_local(t, str(root)) for t in glue_data.TASKS}
    assert got["cola"].train.text_a == ["The cat sat.", "Cat the sat."] and got["cola"].train.labels == [1, 0]
    assert got["cola"].dev["dev"].labels == [1, 0] and got["cola"].train.text_b is None
    assert got["sst2"].train.text_a == ["good movie ", 'bad "film" '] and got["sst2"].dev["dev"].text_a == [
        "fine "
    ]
    assert got["mrpc"].train.text_b == ['"A" b.', "D."] and got["mrpc"].train.labels == [1, 0]
    assert got["stsb"].train.labels == [5.0] and got["stsb"].dev["dev"].labels == [0.25]
    assert got["qqp"].train.text_a == ["Why?", "Who?"] and got["qqp"].train.labels == [0, 1]
    assert got["qnli"].dev["dev"].labels == [1]
    assert got["rte"].train.labels == [1, 0] and got["rte"].dev["dev"].text_b == ["H3."]
    mnli = got["mnli"]
    assert mnli.train.labels == [1]  # hub order: entailment 0, neutral 1, contradiction 2
    assert mnli.dev["dev_matched"].labels == [2] and mnli.dev["dev_mismatched"].labels == [0]
    assert mnli.train.text_a == ["Premise."] and mnli.train.text_b == ["Hypo."]
    assert set(mnli.fingerprint()) == {"train", "dev_matched", "dev_mismatched"}
    assert got["rte"].fingerprint()["train"] != got["rte"].fingerprint()["dev"]


@pytest.mark.parametrize(
    "key, text, message",
    [
        (
            ("RTE", "dev.tsv"),
            "index\tsentence1\tsentence2\tlabel\n0\tP.\tH.\tentailment\n1\tP.\tentailment\n",
            r"RTE/dev\.tsv:3: expected 4 tab-separated columns, got 3",
        ),
        (
            ("RTE", "train.tsv"),
            "index\tsentence1\tsentence2\tlabel\n0\tP.\tH.\tentailed\n",
            r"RTE/train\.tsv:2: unknown label 'entailed' \(expected one of entailment, not_entailment\)",
        ),
        (
            ("CoLA", "dev.tsv"),
            "gj04\t1\t\tOk.\ngj04\t2\t\tBad label.\n",
            r"CoLA/dev\.tsv:2: unknown label '2'",
        ),
        (
            ("CoLA", "train.tsv"),
            "gj04\t1\tOk.\n",
            r"CoLA/train\.tsv:1: expected 4 tab-separated columns, got 3",
        ),
        (("SST-2", "train.tsv"), "sentence\tlabel\n", r"SST-2/train\.tsv: empty split"),
        (("SST-2", "dev.tsv"), "", r"SST-2/dev\.tsv: empty file"),
        (("CoLA", "dev.tsv"), "", r"CoLA/dev\.tsv: empty split"),
        (
            ("STS-B", "dev.tsv"),
            FILES[("STS-B", "dev.tsv")].replace("0.250", "high"),
            r"STS-B/dev\.tsv:2: label 'high' is not a number",
        ),
        (
            ("STS-B", "dev.tsv"),
            FILES[("STS-B", "dev.tsv")].replace("0.250", "7.5"),
            r"STS-B/dev\.tsv:2: score 7\.5 is outside",
        ),
        (
            ("QNLI", "train.tsv"),
            "index\tquestion\ttext\tlabel\n0\tA\tB\tentailment\n",
            r"QNLI/train\.tsv:1: header lacks column\(s\) \['sentence'\]",
        ),
        (
            ("MNLI", "dev_mismatched.tsv"),
            MNLI_DEV_HEAD + "0\t1\t1e\tgov\t(\t(\t(\t(\tP.\tH.\ta\tb\tc\td\te\t-\n",
            r"MNLI/dev_mismatched\.tsv:2: unknown label '-'",
        ),
    ],
)
def test_bad_input_names_file_and_line(tmp_path, key, text, message):
    root = write_glue(tmp_path, {**FILES, key: text})
    task = {"CoLA": "cola", "SST-2": "sst2", "RTE": "rte", "STS-B": "stsb", "QNLI": "qnli", "MNLI": "mnli"}[
        key[0]
    ]
    with pytest.raises(ValueError, match=message):
        glue_data.load_local(task, str(root))


def test_bad_utf8_names_line(tmp_path):
    root = write_glue(tmp_path)
    (root / "SST-2" / "train.tsv").write_bytes(b"sentence\tlabel\nok\t1\nbad \xff\t0\n")
    with pytest.raises(ValueError, match=r"SST-2/train\.tsv:3: not valid UTF-8"):
        glue_data.load_local("sst2", str(root))


def test_missing_files_and_unknown_task(tmp_path):
    root = write_glue(tmp_path)
    (root / "MNLI" / "dev_mismatched.tsv").unlink()
    with pytest.raises(FileNotFoundError, match=r"MNLI/dev_mismatched\.tsv: not found"):
        glue_data.load_local("mnli", str(root))
    with pytest.raises(FileNotFoundError, match=r"nowhere/RTE: not found"):
        glue_data.load_local("rte", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="unknown GLUE task 'wnli'"):
        glue_data.spec("wnli")


def test_hub_columns_map_to_the_same_splits(monkeypatch):
    def fake_load_dataset(path, name):
        assert (path, name) == ("nyu-mll/glue", "mnli")

        def split(n, lab):
            return datasets.Dataset.from_dict({"premise": ["P"] * n, "hypothesis": ["H"] * n, "label": lab})

        return datasets.DatasetDict(
            train=split(2, [0, 2]),
            validation_matched=split(1, [1]),
            validation_mismatched=split(1, [2]),
            test_matched=split(1, [-1]),
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    data = glue_data.load("mnli", None)
    assert data.train.labels == [0, 2] and data.train.text_b == ["H", "H"]
    assert data.dev["dev_matched"].labels == [1] and data.dev["dev_mismatched"].labels == [2]


def test_hub_bad_label_and_offline(monkeypatch):
    def bad(path, name):
        return datasets.DatasetDict(
            train=datasets.Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "label": [5]}),
            validation=datasets.Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "label": [0]}),
        )

    monkeypatch.setattr(datasets, "load_dataset", bad)
    with pytest.raises(ValueError, match="nyu-mll/glue/rte split train row 0: unknown label 5"):
        glue_data.load("rte", None)

    def offline(path, name):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(FileNotFoundError, match="pass --glue-dir"):
        glue_data.load("rte", None)


@pytest.mark.skipif(not REAL_GLUE.is_dir(), reason="shared GLUE data not present")
def test_real_glue_files_parse_with_documented_row_counts():
    counts = {
        "cola": (8551, 1043),
        "sst2": (67349, 872),
        "mrpc": (3668, 408),
        "stsb": (5749, 1500),
        "rte": (2490, 277),
    }
    for task, (train, dev) in counts.items():
        data = glue_data.load_local(task, str(REAL_GLUE))
        assert (len(data.train), len(data.dev["dev"])) == (train, dev), task
    rte = glue_data.load_local("rte", str(REAL_GLUE))
    assert rte.dev["dev"].labels.count(0) == 146  # entailment, per the data README
