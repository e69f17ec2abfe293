import pytest
import yaml

from storagebrief.core import config
from storagebrief.core.config import ParamsError
from conftest import REPO


def test_repo_params_validate():
    params = config.load(REPO / "params.yaml")
    assert params.scale == "quick"
    assert [t.name for t in params.targets][:2] == ["local", "hdd-emulated"]
    assert params.section("preprocess").repeats >= 2      # a spread needs two; paper: 3
    assert config.load(REPO / "params.yaml", ["scale=paper"]).section("preprocess").repeats == 3


def test_paper_overlay_changes_scale(tmp_path, params_file):
    f = params_file()
    quick = config.load(f)
    paper = config.load(f, ["scale=paper"])
    assert paper.section("preprocess").image_count == 1000
    assert paper.section("preprocess").image_bytes == pytest.approx(22e6, rel=0.01)
    assert quick.section("preprocess").image_count == 6


def test_a_command_line_override_wins_over_the_paper_overlay(params_file):
    """`-S scale=paper -S preprocess.repeats=1`: paper scale with the one knob the user named (the overlay used to
    be merged last and silently undid it: a one-repeat paper run became the whole paper plan)."""
    p = config.load(params_file(), ["scale=paper", "preprocess.repeats=1", "preprocess.processes=[2]"])
    assert p.section("preprocess").repeats == 1 and p.section("preprocess").processes == [2]
    assert p.section("preprocess").image_count == 1000                              # the rest is paper's
    swapped = config.load(params_file(), ["preprocess.repeats=1", "scale=paper"])   # order does not matter
    assert swapped.section("preprocess").repeats == 1


def test_override_parses_yaml_values(params_file):
    p = config.load(params_file(), ["preprocess.processes=[4,1,2,2]", "run.cold_cache=false"])
    assert p.section("preprocess").processes == [1, 2, 4]
    assert p.run.cold_cache is False


@pytest.mark.parametrize("override, words", [
    ("preprocess.processes=[0]", ["preprocess.processes", "[0]", "1..1024"]),
    ("preprocess.image_count=-5", ["preprocess.image_count", "-5", "greater than or equal to 1"]),
    ("preprocess.colour=1", ["preprocess.colour", "unknown key", "allowed: bit_depth, channels"]),
    ("preprocess.proceses=[1,2]", ["preprocess.proceses", "did you mean 'processes'?", "allowed:"]),
    ("preprocess.processes=1,2", ["preprocess.processes", '"1,2"', "write a list, e.g. [1, 2]"]),
    ("preprocess.processes=4", ["preprocess.processes", "= 4", "write a list, e.g. [4], not a number"]),
    ("bogus=1", ["bogus", "allowed"]),
    ("preprocess.output_mode=zip", ["preprocess.output_mode", "zip", "sharded", "single"]),
    ("preprocess.image_counts=[100]", ["image_counts", "exceed image_count"]),
    ("preprocess.source_dir=/nonexistent/tiffs", ["source_dir", "/nonexistent/tiffs", "does not exist"]),
    ("targets.0.path=/", ["targets.0.path", "refusing a system directory"]),
    ("targets.0.path=/dev/sda", ["targets.0.path", "/dev"]),
    ("targets.1.profile=floppy", ["targets.1.profile", "floppy", "hdd_7200"]),
    ("targets.1.name=fast", ["names must be unique"]),
])
def test_bad_params_name_key_value_and_allowed(params_file, override, words):
    with pytest.raises(ParamsError) as exc:
        config.load(params_file(), [override])
    for w in words:
        assert w in str(exc.value), (w, str(exc.value))


def test_override_syntax_error(params_file):
    with pytest.raises(ParamsError, match="key=value"):
        config.load(params_file(), ["preprocess.repeats"])


def test_custom_profile(params_file, tmp_path):
    f = params_file()
    data = yaml.safe_load(f.read_text())
    data["profiles"] = {"usb_stick": {"read_mb_per_s": 30, "description": "slow"}}
    data["targets"][1]["profile"] = "usb_stick"
    f.write_text(yaml.safe_dump(data))
    p = config.load(f)
    assert p.profile_catalogue()["usb_stick"].read_mb_per_s == 30


def test_params_hash_changes_with_values(params_file):
    f = params_file()
    assert config.load(f).source_hash != config.load(f, ["preprocess.repeats=2"]).source_hash


def _cli(*args, timeout=30):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "storagebrief.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_yaml_alias_bomb_is_refused_at_once_in_a_file_and_in_s(tmp_path):
    """9 levels of aliases would expand to 9^9 strings (minutes, gigabytes): refused before expansion."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    for args in (["validate", "--params", str(bomb)],
                 ["validate", "-S", "preprocess.processes=[&a [1,1,1,1,1,1,1,1,1], *a, *a, *a, *a, *a]"]):
        res = _cli(*args)
        assert res.returncode == 2 and "alias" in res.stderr and "not allowed" in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and len(res.stderr) < 300


def test_duplicate_keys_and_oversized_values_are_refused(tmp_path, params_file):
    dup = tmp_path / "dup.yaml"
    dup.write_text(params_file().read_text() + "\nrun: {cold_cache: false}\n")
    with pytest.raises(ParamsError, match="duplicate key 'run' .*keep one"):
        config.load(dup)
    with pytest.raises(ParamsError, match="limited to 65,536 bytes"):
        config.load(params_file(), ["preprocess.seed=" + "1" * 70000])


@pytest.mark.parametrize("override, words", [
    ("targets.5.name=x", "targets is a list of 2 item(s); give an index 0..1 (e.g. targets.0.name)"),
    ("targets.name=x", "targets is a list of 2 item(s); give an index 0..1 (e.g. targets.0.name)"),
    ("scale.x=3", "'scale' is not a section"),
])
def test_overrides_into_lists_and_scalars_name_the_key(params_file, override, words):
    res = _cli("validate", "--params", str(params_file()), "-S", override)
    assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_params_that_is_a_directory_is_one_line(tmp_path):
    res = _cli("validate", "--params", str(tmp_path))
    assert res.returncode == 2 and "is a directory" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- names that become paths (issue 36)
@pytest.mark.parametrize("bad", ["../victim", "/abs/victim", "a/b", ".hidden", "..", "", "x" * 65, "sp ace"])
def test_check_name_refuses_what_would_leave_its_folder(bad):
    with pytest.raises(ValueError, match="is not allowed: a name used in file paths"):
        config.check_name(bad, "checkpoint.shapes")


@pytest.mark.parametrize("good", ["llama3-8b", "my_shape.v2", "A1", "1e+06"])
def test_check_name_accepts_names(good):
    assert config.check_name(good, "x") == good


@pytest.mark.parametrize("bad", ["../victim", "/tmp/victim"])
def test_a_target_name_that_is_a_path_is_refused_by_validate(tmp_path, bad):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump({"targets": [{"name": bad, "path": str(tmp_path / "t")}]}))
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and "targets.0.name" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- params.yaml's faults (issue 36)
def test_a_tab_in_params_yaml_is_one_line(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("targets:\n\t- {name: t, path: /x}\n")
    res = _cli("validate", "--params", str(f))
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "tab" in res.stderr and "line 2" in res.stderr


@pytest.mark.parametrize("inside", ["reports/t", ".git/t"])
def test_a_target_inside_the_projects_reports_or_git_is_refused(tmp_path, inside):
    root = tmp_path / "proj"
    (root / "reports").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "dvc.yaml").write_text("stages: {}\n")
    (root / "params.yaml").write_text(yaml.safe_dump({"targets": [{"name": "t", "path": inside}]}))
    res = _cli("validate", "--params", str(root / "params.yaml"))
    assert res.returncode == 2 and inside.split("/")[0] in res.stderr and len(res.stderr.strip().splitlines()) == 1
