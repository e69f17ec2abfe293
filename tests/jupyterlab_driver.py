"""What the JupyterLab tests (test_jupyterlab.py) share: a JupyterLab server started as `make lab` starts it, and
the browser steps a user takes there (open a notebook, Run All, a command from a menu), driven with Selenium."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

BIN = Path(sys.executable).parent
ARTIFACTS = Path(os.environ.get("STORAGEBRIEF_ARTIFACTS", REPO / "reports" / "test-artifacts" / "jupyterlab"))
AUTOSAVE_S = 4       # JupyterLab's autosave interval in this test (its default is 120 s; 10 cost ~20 s of waits)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def lab_server(root: Path, home: Path, bin_dir: Path = BIN, base_env: dict | None = None):
    """JupyterLab serving `root` as `make lab` starts it (`storagebrief lab` from `bin_dir`: terminals with the
    project's rcfile, the environment on PATH), its settings and runtime in `home`, the app exposed so the test can
    run JupyterLab's own commands; `base_env` its environment (a clone's: without this checkout's PYTHONPATH);
    yields (url, token)."""
    port, token = free_port(), "storagebrief-test"
    settings = home / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    docmanager = home / "settings" / "@jupyterlab" / "docmanager-extension"
    docmanager.mkdir(parents=True)
    (docmanager / "plugin.jupyterlab-settings").write_text(json.dumps({"autosave": True,
                                                                       "autosaveInterval": AUTOSAVE_S}))
    # no "get Jupyter news?" toast over the notebook
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false",
                                                                           "checkForUpdates": False}))
    base_env = base_env or os.environ
    env = {**base_env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "JUPYTER_CONFIG_DIR": str(home / "config"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces")}
    log_path = home / "jupyterlab.log"
    log = open(log_path, "w")
    # `make lab` runs `storagebrief lab` (notebooks.lab_command) with these jupyter arguments after it
    command = [str(bin_dir / "storagebrief"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={root}",
               "--LabApp.expose_app_in_browser=True"]
    server = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not listen: {log_path.read_text()[-2000:]}")
        yield f"http://127.0.0.1:{port}", token
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def api(url: str, token: str, path: str, method: str = "GET"):
    import urllib.request
    req = urllib.request.Request(f"{url}/api/{path}", method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = r.read()
    return json.loads(body) if body else None


def leave(driver) -> None:
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


def wait(driver, what, seconds: float, poll: float = 0.5):
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


def shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / name))


def open_notebook(driver, notebook_url: str | None, cells: int = 5):
    """Open (or wait on) a notebook until `cells` of its cells are drawn (fewer for a short one: 00_start_here has
    3) and its kernel is idle."""
    from selenium.webdriver.common.by import By

    if notebook_url:
        driver.get(notebook_url)
    wait(driver, lambda: len(driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-Cell")) >= cells, 90)

    def kernel_idle():
        # the toolbar's kernel status says Idle once the kernel (started in notebooks/) is up
        return driver.execute_script(
            "const s = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');"
            "return s && s.getAttribute('data-status') === 'idle';")
    wait(driver, kernel_idle, 90)


def run_all(driver):
    from selenium.webdriver.common.by import By

    menu = wait(driver, lambda: [m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel")
                                  if m.text == "Run"], 20)
    menu[0].click()
    item = wait(driver, lambda: driver.find_elements(By.CSS_SELECTOR, "li[data-command='runmenu:run-all']"), 10)
    item[0].click()


def prompts(driver) -> list[str]:
    """Every cell's input prompt as shown: '[ ]:', '[*]:', '[3]:'."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('.jp-Notebook .jp-InputPrompt')).map(p => p.textContent);")


def started(driver) -> bool:
    """A cell is queued or running ([*]) or has run ([1]): what Run All shows at once when the kernel took it."""
    return any(re.search(r"\[(\*|\d+)\]", p) for p in prompts(driver))


def run_all_started(driver, seconds: float = 30) -> bool:
    """Run All, and once more if no cell started within `seconds`: under the suite's load a Run All clicked as the
    kernel's connection settled once moved to the last cell and queued nothing (run25: no [*] in 300 s, the kernel
    idle). True when it took a second click."""
    run_all(driver)
    try:
        wait(driver, lambda: started(driver), seconds)
        return False
    except AssertionError:
        run_all(driver)
        wait(driver, lambda: started(driver), seconds)
        return True


def busy(driver) -> bool:
    return any("*" in p for p in prompts(driver))


def save(driver):
    from selenium.webdriver.common.by import By

    driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook")[0].click()
    driver.execute_script("document.querySelector('.jp-Notebook').focus();")
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    ActionChains(driver).key_down(Keys.CONTROL).send_keys("s").key_up(Keys.CONTROL).perform()
    time.sleep(2)


def run_command(driver, name: str, args: dict | None = None) -> None:
    """One of JupyterLab's own commands, as its menus run them (the app is exposed by the test's server)."""
    driver.execute_async_script("const [name, args, done] = arguments;"
                                "window.jupyterapp.commands.execute(name, args).then(() => done(), () => done());",
                                name, args or {})


def panel_js(body: str) -> str:
    """JavaScript run against the open notebook whose path is the first argument (its panel: `panel`)."""
    return ("const path = arguments[0]; const panel = Array.from(window.jupyterapp.shell.widgets('main'))"
            ".find(w => w.context && w.context.path === path); if (!panel) return null; " + body)


def model(driver, path: str) -> dict | None:
    """The notebook as JupyterLab holds it now (cells, outputs), whether or not it was saved."""
    text = driver.execute_script(panel_js("return JSON.stringify(panel.content.model.toJSON());"), path)
    return json.loads(text) if text else None


def tabs(url: str, token: str) -> set[str]:
    """The documents open in JupyterLab's saved workspaces (what it reopens): their paths under the server's root."""
    import urllib.request
    req = urllib.request.Request(f"{url}/lab/api/workspaces", headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        spaces = json.loads(r.read())["workspaces"]["values"]
    return {e["data"]["path"] for w in spaces for e in w["data"].values()
            if isinstance(e, dict) and isinstance(e.get("data"), dict) and "path" in e["data"]}
