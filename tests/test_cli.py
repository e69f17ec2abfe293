from storagebrief.cli import main


def test_doctor_reports_capabilities(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for key in ("root", "drop_caches", "cgroup_memory", "cgroup_blkio", "tracefs", "fio", "weasyprint"):
        assert key in out


def test_validate_ok_and_error(params_file, capsys):
    f = params_file()
    assert main(["validate", "--params", str(f)]) == 0
    assert main(["validate", "--params", str(f), "-S", "preprocess.interpolation=magic"]) == 2
    err = capsys.readouterr().err
    assert "preprocess.interpolation" in err and "magic" in err and "area" in err


def test_missing_params_file(tmp_path, capsys):
    assert main(["validate", "--params", str(tmp_path / "nope.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
