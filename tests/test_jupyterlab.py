"""The front door, walked in a real browser: JupyterLab started on loopback by the test, Debian's
Chromium driven by Selenium, notebooks/01_preprocess.ipynb opened as a user opens it (the kernel
starts in notebooks/): a knob edited in the parameters cell, Run All, saved, autosave waited for; then
the brief command the notebook printed, typed where the notebook runs; then a typo'd key. Screenshots
are kept as test artifacts in reports/test-artifacts/jupyterlab/ (override with STORAGEBRIEF_ARTIFACTS).

The project is a copy of this repository's tracked files in a temp folder (git init + commit) whose
params.yaml is a tiny profile and whose notebooks show it (`storagebrief notebooks --write`, then
`make notebooks`' `storagebrief notebooks --refresh`), so Run All takes seconds and `git status`,
`dvc status` and `storagebrief notebooks` can be compared before and after.

One JupyterLab server and one Chromium serve the module (their start-up was half of each test's time);
each test gets its own project folder under the server's root, opens its notebook in a JupyterLab
workspace of its own, and has its kernels shut down after it, so the tests pass in either order."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from storagebrief import notebooks

webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                 reason="needs Debian's chromium and chromium-driver (make installs them as root)")]
BIN = Path(sys.executable).parent
TINY_PREPROCESS = {"image_count": 8, "image_counts": [4], "processes": [1, 2], "repeats": 1, "image_width": 640,
                   "image_height": 480, "num_classes": 2, "resize_width": 32, "resize_height": 32}
ARTIFACTS = Path(os.environ.get("STORAGEBRIEF_ARTIFACTS", REPO / "reports" / "test-artifacts" / "jupyterlab"))
AUTOSAVE_S = 4       # JupyterLab's autosave interval in this test (its default is 120 s; 10 cost ~20 s of waits)
# A library's own log line in a cell's output: absl/glog lines (I/W/E/F + MMDD time), TensorFlow's
# pre-init notice and its Python logger's lines.
LIBRARY_LOG = re.compile(r"^(?:[IWEF]\d{4} \d+:\d+:\d+|WARNING: All log messages before absl|.*oneDNN custom "
                         r"operations|.*cpu_feature_guard|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] )", re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, cwd, **kw) -> str:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True, env=env, **kw).stdout


def _project(tmp: Path) -> Path:
    """A git project holding this repository's tracked files, a tiny params.yaml and its notebooks."""
    proj = tmp / "proj"
    files = _run(["git", "ls-files", "-co", "--exclude-standard"], REPO).splitlines()
    for rel in files:
        src = REPO / rel
        if src.is_file() and not rel.startswith(("reports/", "data/targets/")):
            (proj / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, proj / rel)
    data = yaml.safe_load((REPO / "params.yaml").read_text())
    data["preprocess"].update(TINY_PREPROCESS)
    data["run"]["trace"] = False      # the browser test checks the front door, not block tracing
    text = (REPO / "params.yaml").read_text()
    # keep params.yaml's comments (the notebook cell shows them): rewrite only the preprocess section
    start = text.index("\npreprocess:")
    end = text.index("\n\n", start + 1)
    section = "\npreprocess:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in data["preprocess"].items())
    text = text[:start] + section.rstrip("\n") + text[end:]
    text = text.replace("  trace: true ", "  trace: false")
    (proj / "params.yaml").write_text(text)
    (proj / "data" / "targets").mkdir(parents=True, exist_ok=True)
    _run([str(BIN / "storagebrief"), "notebooks", "--write"], proj)
    _run([str(BIN / "storagebrief"), "notebooks", "--refresh"], proj)       # what `make notebooks` runs
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"]):
        _run(cmd, proj)
    return proj


def _status(proj: Path) -> tuple[str, str, str]:
    git = _run(["git", "status", "--porcelain"], proj)
    dvc = _run([str(BIN / "dvc"), "status"], proj)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    check = subprocess.run([str(BIN / "storagebrief"), "notebooks"], cwd=proj, capture_output=True, text=True, env=env)
    return git, dvc, f"exit {check.returncode}: {check.stdout}{check.stderr}"   # exit 1 when a cell drifted


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One JupyterLab for the module, serving a folder that holds each test's own project (see `lab`);
    yields (that folder, url, token)."""
    root = tmp_path_factory.mktemp("lab-root")
    home = tmp_path_factory.mktemp("jupyter")
    port, token = _free_port(), "storagebrief-test"
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    docmanager = home / "settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": True,
                                                                       "autosaveInterval": AUTOSAVE_S}))
    # no "get Jupyter news?" toast over the notebook
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")}
    log_path = home / "jupyterlab.log"
    log = open(log_path, "w")
    # as `make lab` starts it (storagebrief lab: terminals with the project's rcfile, the environment on PATH),
    # with the app exposed so the test can open a terminal and a console through JupyterLab's own commands
    command, lab_env = notebooks.lab_command(["--no-browser", "--ip=127.0.0.1", f"--port={port}",
                                              f"--IdentityProvider.token={token}", "--allow-root",
                                              f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True"],
                                             bin_dir=BIN)
    server = subprocess.Popen(command, cwd=root, env={**lab_env, **env, "PATH": lab_env["PATH"]}, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not listen: {log_path.read_text()[-2000:]}")
        yield root, f"http://127.0.0.1:{port}", token
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def _api(url: str, token: str, path: str, method: str = "GET"):
    import urllib.request
    req = urllib.request.Request(f"{url}/api/{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
    return json.loads(body) if body else None


@pytest.fixture
def lab(server, browser, request):
    """The shared server and browser with this test's own project (built in its own folder under the
    server's root, its notebook opened in a JupyterLab workspace of its own); afterwards its kernels
    are shut down and the browser leaves the page, so nothing a test ran, edited or left open reaches
    the next one. Yields (project, the notebook's URL)."""
    root, url, token = server
    proj = _project(root / request.node.name)
    notebook = (proj / "notebooks" / "01_preprocess.ipynb").relative_to(root).as_posix()
    yield proj, f"{url}/lab/workspaces/{request.node.name}/tree/{notebook}?token={token}"
    for session in _api(url, token, "sessions"):
        _api(url, token, f"sessions/{session['id']}", "DELETE")     # its kernel stops with it
    _leave(browser)


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1100"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _leave(driver) -> None:
    """Leave the page even when JupyterLab asks to keep unsaved changes (a beforeunload prompt)."""
    from selenium.common.exceptions import NoAlertPresentException, UnexpectedAlertPresentException

    try:
        driver.get("about:blank")
    except UnexpectedAlertPresentException:
        pass
    try:
        driver.switch_to.alert.accept()
        driver.get("about:blank")
    except NoAlertPresentException:
        pass


def _wait(driver, what, seconds: float, poll: float = 0.5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            value = what()
        except Exception:   # the page is still building: elements come and go
            value = None
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {seconds} s waiting for {getattr(what, '__name__', what)}")


def _shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / name))


def _open(driver, notebook_url: str):
    from selenium.webdriver.common.by import By

    driver.get(notebook_url)
    _wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")) > 4, 90)

    def kernel_idle():
        # the toolbar's kernel status says Idle once the kernel (started in notebooks/) is up
        return driver.execute_script(
            "const s = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');"
            "return s && s.getAttribute('data-status') === 'idle';")
    _wait(driver, kernel_idle, 90)


def _run_all(driver):
    from selenium.webdriver.common.by import By

    menu = _wait(driver, lambda: [m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel")
                                  if m.text == "Run"], 20)
    menu[0].click()
    item = _wait(driver, lambda: driver.find_elements(By.CSS_SELECTOR, "li[data-command='runmenu:run-all']"), 10)
    item[0].click()


def _busy(driver) -> bool:
    prompts = driver.execute_script(
        "return Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt')).map(p => p.textContent);")
    return any("*" in p for p in prompts)


def _save(driver):
    from selenium.webdriver.common.by import By

    driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook")[0].click()
    driver.execute_script("document.querySelector('.jp-Notebook').focus();")
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    ActionChains(driver).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
    time.sleep(2)


def _edit_parameters(driver, old: str, new: str) -> None:
    """Replace text in the parameters cell as typing would: through the cell's CodeMirror editor, so
    JupyterLab's model (and its autosave) sees the change."""
    done = driver.execute_script(
        "const [old, neu] = arguments;"
        "for (const el of document.querySelectorAll('.jp-Notebook .jp-CodeCell .cm-content')) {"
        "  const view = el.cmView && el.cmView.view; if (!view) continue;"
        "  const text = view.state.doc.toString(); const at = text.indexOf(old);"
        "  if (at < 0) continue;"
        "  view.dispatch({changes: {from: at, to: at + old.length, insert: neu}}); return true; }"
        "return false;", old, new)
    assert done, f"no code cell editor holds {old!r}"


def _outputs(nb: dict) -> str:
    return "\n".join("".join(o.get("text", "")) + "".join(o.get("traceback", [])) +
                     "".join(o.get("data", {}).get("text/plain", "")) for c in nb["cells"] for o in c.get("outputs", []))


def test_a_knob_edited_run_and_saved_in_jupyterlab_leaves_git_dvc_and_the_checks_as_they_were(lab, browser):
    from selenium.webdriver.common.by import By

    proj, notebook_url = lab
    ipynb = proj / "notebooks" / "01_preprocess.ipynb"
    before = _status(proj)
    _open(browser, notebook_url)
    _shot(browser, "01-first-screen.png")
    time.sleep(2)
    assert not browser.execute_script("return !!document.querySelector('.lm-TabBar-tab.jp-mod-dirty');"), \
        "the notebook opened with unsaved changes (the dot on its tab)"
    _edit_parameters(browser, "'processes': [1, 2],", "'processes': [1],")
    # autosave (every AUTOSAVE_S here) writes the edit to disk without a save: wait for it
    _wait(browser, lambda: "'processes': [1]," in ipynb.read_text(), AUTOSAVE_S * 6, poll=1)
    _run_all(browser)
    _wait(browser, lambda: not _busy(browser) and browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output img"),
          420, poll=1)
    _shot(browser, "02-finished.png")
    page = browser.find_element(By.CSS_SELECTOR, ".jp-Notebook").text
    assert "Knobs changed here over" in page and "processes = [1] (params.yaml: [1, 2])" in page
    assert "measured runs (runs.csv)" in page and "completion time (s)" in page
    assert "Traceback" not in page and "Error" not in page.split("Results")[0]
    _save(browser)
    time.sleep(AUTOSAVE_S * 2.5)                  # past autosave: whatever it writes after the run is written
    nb = json.loads(ipynb.read_text())
    kinds = [o["output_type"] for c in nb["cells"] for o in c.get("outputs", [])]
    assert "error" not in kinds and "display_data" in kinds
    assert "'processes': [1]," in "".join(nb["cells"][1]["source"])      # the edit is saved in the .ipynb
    text = _outputs(nb)
    assert not LIBRARY_LOG.findall(text), f"library log lines in the notebook's output: {LIBRARY_LOG.findall(text)}"
    runs = list((proj / "reports" / "runs").glob("*/preprocess/status.json"))
    assert len(runs) == 1 and json.loads(runs[0].read_text())["complete"] is True
    assert "'processes': [1, 2]," in (proj / "notebooks" / "01_preprocess.py").read_text()
    assert _status(proj) == before      # git status, dvc status and `storagebrief notebooks`: as they were

    # the brief command the notebook printed, typed where it says: a JupyterLab terminal, then a console
    command = re.search(r"A brief of this run alone: (storagebrief brief --reports \S+)\n\(in a terminal as it is; "
                        r"in a console or a cell: (!storagebrief brief --reports \S+)\)", text)
    assert command, text[-2000:]
    brief_html = runs[0].parent.parent / "brief.html"
    said = _in_console(browser, command.group(2))
    assert brief_html.exists() and f"wrote {brief_html}" in said and "[IPKernelApp]" not in said, said
    brief_html.unlink()
    _in_terminal(browser, proj, command.group(1))
    assert brief_html.exists()
    assert _status(proj) == before


def _command(driver, name: str, args: dict | None = None) -> None:
    """One of JupyterLab's own commands, as its menus run them (the app is exposed by the test's server)."""
    driver.execute_async_script("const [name, args, done] = arguments;"
                                "window.jupyterapp.commands.execute(name, args).then(() => done(), () => done());",
                                name, args or {})


def _in_terminal(driver, proj: Path, line: str) -> None:
    """File → New → Terminal, then what a user types: where am I, is storagebrief there, the printed line (from the
    project root, where `make lab` serves: this test's server serves the folder above each project)."""
    from selenium.webdriver.common.by import By

    _command(driver, "terminal:create-new")
    area = _wait(driver, lambda: driver.find_elements(By.CSS_SELECTOR, ".jp-Terminal .xterm-helper-textarea"), 60)
    out = proj / "reports" / "terminal.txt"      # reports/ is git-ignored: git status stays as it was
    time.sleep(2)                                 # the shell's prompt (its rcfile read)
    area[-1].send_keys(f"{{ pwd; command -v storagebrief; cd {proj} && {line} 2>&1; echo exit=$?; }} > {out}\n")
    said = _wait(driver, lambda: out.exists() and "exit=" in out.read_text() and out.read_text(), 600, poll=2)
    _shot(driver, "04-terminal.png")
    where, found, *rest = said.splitlines()
    assert where == str(proj.parents[1]), said                 # the server's root (make lab: the project)
    assert found == str(BIN / "storagebrief"), said            # the rcfile kept the environment first on PATH
    assert rest[-1] == "exit=0" and not any("[IPKernelApp]" in r for r in rest), said


def _in_console(driver, line: str) -> str:
    """Right-click → New Console for Notebook (its kernel in notebooks/), the printed console line, Shift+Enter."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _command(driver, "notebook:create-console")
    prompt = _wait(driver, lambda: driver.find_elements(
        By.CSS_SELECTOR, ".jp-CodeConsole-promptCell .cm-content"), 90)
    _wait(driver, lambda: driver.execute_script(
        "const s = document.querySelector('.jp-ConsolePanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator, "
        ".jp-ConsolePanel:not(.lm-mod-hidden) .jp-Toolbar-kernelStatus');"
        "return !s || s.getAttribute('data-status') !== 'busy';"), 60)
    prompt[-1].click()
    ActionChains(driver).send_keys(line).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
    said = _wait(driver, lambda: [e.text for e in driver.find_elements(
        By.CSS_SELECTOR, ".jp-CodeConsole-content .jp-OutputArea-output") if "wrote " in e.text], 600, poll=2)
    _shot(driver, "05-console.png")
    return "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, ".jp-CodeConsole-content .jp-OutputArea-output"))


def test_a_typo_in_the_knobs_shows_one_short_message_in_jupyterlab(lab, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    proj, notebook_url = lab
    _open(browser, notebook_url)
    editor = browser.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell .cm-content")[0]
    editor.click()
    ActionChains(browser).key_down(Keys.CONTROL).send_keys(Keys.END).key_up(Keys.CONTROL).perform()
    ActionChains(browser).send_keys(Keys.ENTER, 'preprocess["proceses"] = [1, 2]').perform()
    _run_all(browser)
    error = _wait(browser, lambda: [e for e in browser.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")
                                    if "storagebrief: error" in e.text], 120)
    _shot(browser, "03-typo-message.png")
    text = error[0].text
    assert "invalid parameter preprocess.proceses: unknown key (did you mean 'processes'?)" in text
    assert "Traceback" not in text and len(text.strip().splitlines()) == 1
    assert not list((proj / "reports").glob("runs/*/preprocess"))     # refused before any work
