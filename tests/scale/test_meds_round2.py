"""MEDS, issue 36: a subject in two data files refused by every loader (the MEDS standard: "data about a single
subject cannot be split across parquet files"), an unknown split refused with the known ones listed, mixed-type
code columns refused, an empty codes file refused as a vocab, resume from another spelling of the root, and
truncation without max_len refused everywhere.

The cohort is written by the MEDS test generator (meds-testing-helpers' MEDSDatasetGenerator, offline): static
events, MEDS_BIRTH / MEDS_DEATH, data/0..2.parquet, metadata/subject_splits.parquet and the empty
metadata/codes.parquet it writes."""

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from omnipos.app.cli import main
from omnipos.scale import (
    ShardedMedsDataset,
    load_meds,
    meds_data_files,
    precompute_meds,
    vocab_from_codes,
)
from omnipos.timeseries import EventBatch


def generate_meds(root, subjects: int = 10, seed: int = 1):
    """A MEDS root from meds-testing-helpers' generator (its doctest configuration), 3 subjects per data file."""
    from meds_testing_helpers.dataset_generator import (
        MEDSDataDFGenerator,
        MEDSDatasetGenerator,
    )
    from meds_testing_helpers.rvs import (
        DatetimeGenerator,
        PositiveIntGenerator,
        PositiveTimeDeltaGenerator,
        ProportionGenerator,
    )

    def day(text):
        return np.datetime64(text, "us")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # rvs: "no explicit representation of timezones"
        data = MEDSDataDFGenerator(
            birth_datetime_per_subject=DatetimeGenerator([day("2001-01-01"), day("2002-02-02")]),
            start_data_datetime_per_subject=DatetimeGenerator([day("2021-01-01"), day("2022-02-02")]),
            time_between_birth_and_data_per_subject=PositiveTimeDeltaGenerator(
                [np.timedelta64(20, "Y"), np.timedelta64(30, "Y")]),
            time_between_data_and_death_per_subject=PositiveTimeDeltaGenerator(
                [np.timedelta64(2, "D"), np.timedelta64(10, "D")]),
            time_between_data_events_per_subject=PositiveTimeDeltaGenerator(
                [np.timedelta64(3, "h"), np.timedelta64(20, "m")]),
            num_events_per_subject=PositiveIntGenerator([1, 2, 3]),
            num_measurements_per_event=PositiveIntGenerator([1, 2, 3]),
            num_static_measurements_per_subject=PositiveIntGenerator([2]),
            frac_dynamic_code_occurrences_with_value=ProportionGenerator([0, 0.1, 0.9]),
            frac_static_code_occurrences_with_value=ProportionGenerator([0]),
            static_vocab_size=4, dynamic_vocab_size=16, frac_subjects_with_death=0.5)
        MEDSDatasetGenerator(data_generator=data, shard_size=3, dataset_name="omnipos-round2").sample(
            subjects, np.random.default_rng(seed)).write(root)
    return root


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    return generate_meds(tmp_path_factory.mktemp("generated") / "root")


@pytest.fixture(scope="module")
def job(generated, tmp_path_factory):
    out = tmp_path_factory.mktemp("job") / "out"
    precompute_meds(generated, out, shard_size=2, progress=False)
    return out


# -- 1. a subject in two data files ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def straddling(tmp_path_factory):
    """The generated root with subject S's later events moved into another data file: (root, S, file of its
    first events, file of its later ones)."""
    root = generate_meds(tmp_path_factory.mktemp("straddling") / "root")
    splits = pd.read_parquet(root / "metadata" / "subject_splits.parquet")
    train = set(splits.loc[splits["split"] == "train", "subject_id"])
    files = meds_data_files(root)
    first = pd.read_parquet(files[0])
    subject = next(s for s in first["subject_id"] if s in train)
    rows = first.index[(first["subject_id"] == subject) & first["time"].notna()]
    moved = rows[len(rows) // 2:]
    assert 0 < len(moved) < len(rows)
    second = pd.read_parquet(files[1])
    pd.concat([second, first.loc[moved]], ignore_index=True).to_parquet(files[1], index=False)
    first.drop(index=moved).to_parquet(files[0], index=False)
    return root, int(subject), files[0].resolve(), files[1].resolve()


@pytest.fixture(scope="module")
def straddling_job(straddling, tmp_path_factory):
    root, subject, a, b = straddling
    out = tmp_path_factory.mktemp("straddling-job") / "out"
    with pytest.raises(ValueError, match=_across(subject, a, b)):  # found once every file is done
        precompute_meds(root, out, shard_size=2, progress=False)
    return out


def _across(subject, a, b) -> str:
    return (rf"subject {subject} is in two MEDS data files, {re.escape(str(a))} .*and {re.escape(str(b))} "
            r".*MEDS data files must partition the subjects")


@pytest.mark.parametrize("loader", ["load_meds", "load_meds(split=)", "load_meds(max_len=)", "ShardedMedsDataset",
                                    "ShardedMedsDataset(split=)"])
def test_a_subject_in_two_data_files_is_refused_by_every_loader(straddling, straddling_job, loader):
    _, subject, a, b = straddling
    call = {"load_meds": lambda: load_meds(straddling_job),
            "load_meds(split=)": lambda: load_meds(straddling_job, split="train"),
            "load_meds(max_len=)": lambda: load_meds(straddling_job, max_len=3, truncation="head"),
            "ShardedMedsDataset": lambda: ShardedMedsDataset(straddling_job),
            "ShardedMedsDataset(split=)": lambda: ShardedMedsDataset(straddling_job, split="train")}[loader]
    with pytest.raises(ValueError, match=_across(subject, a, b)):
        call()


def test_a_subject_in_two_data_files_refused_by_the_cli(straddling, tmp_path, capsys):
    root, subject, a, b = straddling
    assert main(["precompute", "meds", str(root), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert re.search(_across(subject, a, b), capsys.readouterr().err)


def test_partitioned_subjects_each_come_back_once(generated, job):
    expected = EventBatch.from_parquet(generated)
    assert load_meds(job).subjects == expected.subjects == list(range(10))
    assert sorted(item["subject_id"] for item in ShardedMedsDataset(job)) == expected.subjects
    train = EventBatch.from_parquet(generated, split="train").subjects
    assert load_meds(job, split="train").subjects == train
    assert load_meds(job, max_len=2, truncation="tail").subjects == expected.subjects


# -- 2. an unknown split -----------------------------------------------------------------------------------------
KNOWN = r"'held_out', 'train', 'tuning'"


def test_an_unknown_split_is_refused_listing_the_known_ones(generated, job, tmp_path, capsys):
    with pytest.raises(ValueError, match=rf"split='dev' is not a split of .*; its splits: {KNOWN}"):
        load_meds(job, split="dev")
    with pytest.raises(ValueError, match=rf"split='dev' is not a split of .*; its splits: {KNOWN}"):
        ShardedMedsDataset(job, split="dev")
    with pytest.raises(ValueError, match=rf"split='dev' .*whose splits are {KNOWN}"):
        precompute_meds(generated, tmp_path / "out", split="dev", progress=False)
    assert main(["precompute", "meds", str(generated), "--out", str(tmp_path / "out"), "--split", "dev",
                 "--no-progress"]) == 2
    assert re.search(rf"split='dev' .*whose splits are {KNOWN}", capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
    # a job of one split knows the others by name: an unknown one is still "not a split", a known one "only"
    precompute_meds(generated, tmp_path / "tuning", split="tuning", progress=False)
    with pytest.raises(ValueError, match=rf"split='dev' is not a split of .*; its splits: {KNOWN}"):
        ShardedMedsDataset(tmp_path / "tuning", split="dev")
    with pytest.raises(ValueError, match="holds only the 'tuning' subjects"):
        ShardedMedsDataset(tmp_path / "tuning", split="train")


def test_a_known_split_without_subjects_in_the_data_is_empty_not_refused(generated, tmp_path):
    root = generate_meds(tmp_path / "root")
    splits = pd.read_parquet(root / "metadata" / "subject_splits.parquet")
    extra = pd.DataFrame({"subject_id": [10**6], "split": ["external"]})  # named by the file, absent from data
    pd.concat([splits, extra], ignore_index=True).to_parquet(root / "metadata" / "subject_splits.parquet")
    precompute_meds(root, tmp_path / "out", progress=False)
    assert len(ShardedMedsDataset(tmp_path / "out", split="external")) == 0
    assert load_meds(tmp_path / "out", split="external").subjects == []


# -- 3. codes of mixed types -------------------------------------------------------------------------------------
def frame(codes) -> pd.DataFrame:
    return pd.DataFrame({"subject_id": np.arange(len(codes)) % 2,
                         "time": pd.to_datetime("2020-01-01") + pd.to_timedelta(np.arange(len(codes)), "h"),
                         "code": pd.Series(codes, dtype=object), "numeric_value": np.ones(len(codes))})


@pytest.mark.parametrize("codes, kinds", [([1, "1", "A"], "int 1 and str '1'"),
                                          (["A", 2.5], "str 'A' and float 2.5"),
                                          ([1, 1.0], "int 1 and float 1.0"),
                                          ([True, 1], "bool True and int 1")])
def test_a_code_column_of_mixed_types_is_refused(codes, kinds):
    with pytest.raises(ValueError, match=re.escape(f"column 'code' mixes code types ({kinds}")):
        EventBatch.from_frame(frame(codes))
    with pytest.raises(ValueError, match=re.escape(f"column 'code' mixes code types ({kinds}")):
        EventBatch.from_frame(frame(codes), vocab=["<pad>", "1", "A"], unknown_code="unk")


@pytest.mark.parametrize("codes, vocab", [([3, 1, 1, 20], ["<pad>", "1", "3", "20"]),  # numbers in order
                                          (["b", None, "a"], ["<pad>", "a", "b"]),
                                          ([1.5, 2.0], ["<pad>", "1.5", "2.0"])])
def test_a_code_column_of_one_type_gives_a_vocab_without_repeats(codes, vocab):
    batch = EventBatch.from_frame(frame(codes), drop_missing=True)
    assert batch.vocab == vocab and len(set(batch.vocab)) == len(batch.vocab)
    got = sorted(batch.vocab[c] for c in batch.codes[batch.mask].tolist())
    assert got == sorted(str(c) for c in codes if c is not None)


def test_two_codes_of_one_type_printing_alike_are_refused():
    # float64 1.1 and float32 1.1 are different values of one kind (floats) whose strings are both '1.1'
    with pytest.raises(ValueError, match=re.escape("holds two different codes named '1.1' (1.1 and np.float32(1.1))")):
        EventBatch.from_frame(frame([1.1, np.float32(1.1)]))


def test_a_vocab_naming_a_code_twice_is_refused(generated, tmp_path):
    with pytest.raises(ValueError, match="vocab must not repeat a code"):
        precompute_meds(generated, tmp_path / "out", vocab=["<pad>", 1, "1"], progress=False)


# -- 4. an empty codes file --------------------------------------------------------------------------------------
def test_the_generators_empty_codes_file_is_refused_as_a_vocab(generated, tmp_path, capsys):
    codes = generated / "metadata" / "codes.parquet"
    assert len(pd.read_parquet(codes)) == 0  # what meds-testing-helpers writes
    for unknown in ("unk", "error"):
        with pytest.raises(ValueError, match=rf"vocab: {re.escape(str(codes))} lists no codes"):
            vocab_from_codes(codes, unknown)
        with pytest.raises(ValueError, match=rf"vocab: {re.escape(str(codes))} lists no codes"):
            precompute_meds(generated, tmp_path / "out", vocab=codes, unknown_code=unknown, progress=False)
    assert main(["precompute", "meds", str(generated), "--out", str(tmp_path / "out"), "--vocab", str(codes),
                 "--unknown-code", "unk", "--no-progress"]) == 2
    assert f"vocab: {codes} lists no codes" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"vocab=\['<pad>', '<unk>'\] holds no codes"):
        precompute_meds(generated, tmp_path / "out", vocab=["<pad>", "<unk>"], unknown_code="unk", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_vocab_that_makes_every_code_unknown_is_refused(generated, tmp_path, capsys):
    other = tmp_path / "other-codes.parquet"
    pd.DataFrame({"code": ["ICD10//I21", "LOINC//8867-4"]}).to_parquet(other)  # another dataset's codes
    refused = rf"none of the cohort's codes is in the vocab \({re.escape(str(other))}: 2 codes\), so with " \
              r"unknown_code='unk' every one of its \d+ events became '<unk>'"
    with pytest.raises(ValueError, match=refused):
        precompute_meds(generated, tmp_path / "out", vocab=other, unknown_code="unk", progress=False)
    with pytest.raises(ValueError, match=refused):  # refused again on resume: the job is the same
        precompute_meds(generated, tmp_path / "out", vocab=other, unknown_code="unk", progress=False)
    assert main(["precompute", "meds", str(generated), "--out", str(tmp_path / "cli"), "--vocab", str(other),
                 "--unknown-code", "unk", "--no-progress"]) == 2
    assert re.search(refused, capsys.readouterr().err)
    with pytest.raises(ValueError, match=r"vocab \(the vocab list given: 1 codes\)"):
        precompute_meds(generated, tmp_path / "list", vocab=["<pad>", "<unk>", "X"], unknown_code="unk",
                        progress=False)
    # a vocab that knows one code of one file maps all the others to <unk>, as asked
    data = pd.concat([pd.read_parquet(f) for f in meds_data_files(generated)])
    pd.DataFrame({"code": ["ICD10//I21", "MEDS_BIRTH"]}).to_parquet(other)
    precompute_meds(generated, tmp_path / "one", vocab=other, unknown_code="unk", progress=False)
    batch = load_meds(tmp_path / "one")
    assert batch.vocab == ["<pad>", "<unk>", "ICD10//I21", "MEDS_BIRTH"]
    births = int((data["code"] == "MEDS_BIRTH").sum())
    assert 0 < births == int((batch.codes[batch.mask] == 3).sum()) < int((batch.codes[batch.mask] == 1).sum())


# -- 5. the same job from another spelling of the root -----------------------------------------------------------
def test_resume_from_a_relative_and_an_absolute_root(generated, tmp_path, monkeypatch):
    monkeypatch.chdir(generated.parent)
    first = precompute_meds(generated.name, tmp_path / "out", progress=False)
    assert first.units == 3 and first.units_resumed == 0
    again = precompute_meds(generated.resolve(), tmp_path / "out", progress=False)
    assert again.units_resumed == 3 and again.items_computed == 0
    monkeypatch.chdir(tmp_path)
    relative = precompute_meds(f"../{generated.parent.name}/{generated.name}", "out", split="train", progress=False,
                               overwrite=True)
    assert relative.units_resumed == 0
    assert precompute_meds(generated, tmp_path / "out", split="train", progress=False).units_resumed == 3


# -- 6. truncation without max_len -------------------------------------------------------------------------------
@pytest.mark.parametrize("truncation", ["head", "tail", "split"])
def test_truncation_without_max_len_is_refused_everywhere(generated, job, tmp_path, truncation, capsys):
    needs = rf"truncation='{truncation}' needs max_len="
    with pytest.raises(ValueError, match=needs):
        precompute_meds(generated, tmp_path / "out", truncation=truncation, progress=False)
    assert main(["precompute", "meds", str(generated), "--out", str(tmp_path / "out"), "--truncation", truncation,
                 "--no-progress"]) == 2
    assert re.search(needs, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=needs):
        load_meds(job, truncation=truncation)
    with pytest.raises(ValueError, match=needs):
        ShardedMedsDataset(job, truncation=truncation)
    with pytest.raises(ValueError, match=needs):
        EventBatch.from_parquet(generated, truncation=truncation)
    with pytest.raises(ValueError, match=needs):
        next(EventBatch.batches(generated, 4, truncation=truncation))
