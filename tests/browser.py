"""Drive Airflow 3.3's UI with Playwright and Debian's Chromium (no browser download), as a
person would: used by tests/test_airflow_e2e.py::test_the_ui_in_a_browser.

Selectors are the UI's own accessible names (aria labels and roles), as Airflow 3.3 renders
them: "Dag Import Error" (the badge on the Dags page), "Dag Docs" (the book icon on a DAG's
page), "Show Graph (Press g)", "Trigger Dag" (then the dialog's "Run Parameters" and "Trigger").
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

TIMEOUT_MS = 90_000  # a loaded 2-core machine renders slowly


def drive_the_ui(base: str, user: str, password: str, dag_id: str, shots: Path, chromium: str,
                 args: list[str], finished_run: Callable[[set[str]], str], known_runs: Callable[[], set[str]]
                 ) -> dict:
    """Log in, look at the Dags list, the DAG's docs and graph, trigger a run from the dialog and
    read its page; returns what was found (note text, docs image, graph) and saves screenshots."""
    from playwright.sync_api import expect, sync_playwright

    found: dict = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(TIMEOUT_MS)
        try:
            page.goto(base + "/")
            page.locator("input[name=username]").fill(user)
            page.locator("input[name=password]").fill(password)
            page.locator("button[type=submit]").click()
            page.wait_for_url(base + "/")

            page.goto(base + "/dags")
            expect(page.get_by_role("link", name=dag_id)).to_be_visible()
            badge = page.get_by_role("button", name="Dag Import Error")
            found["import_errors_badge"] = badge.count() > 0
            page.screenshot(path=str(shots / "01-dags.png"))
            if found["import_errors_badge"]:
                badge.click()
                dialog = page.get_by_role("dialog")
                expect(dialog).to_contain_text("dbsp validate")
                page.screenshot(path=str(shots / "02-import-errors.png"))
                page.keyboard.press("Escape")

            page.goto(f"{base}/dags/{dag_id}")
            page.get_by_role("button", name="Dag Docs").click()
            dialog = page.get_by_role("dialog")
            image = dialog.locator("img").first
            expect(image).to_be_visible()
            page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle())
            found["docs_image"] = image.get_attribute("src")
            found["docs_text"] = dialog.inner_text()
            page.screenshot(path=str(shots / "03-docs.png"))
            page.keyboard.press("Escape")

            page.get_by_role("button", name="Show Graph (Press g)").click()
            graph = page.locator(".react-flow")
            expect(graph.get_by_text("quality_check", exact=True)).to_be_visible()
            found["graph"] = graph.inner_text()
            page.screenshot(path=str(shots / "04-graph.png"))

            before = known_runs()
            page.get_by_role("button", name="Trigger Dag").first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("Run Parameters")).to_be_visible()
            page.screenshot(path=str(shots / "05-trigger.png"))
            dialog.get_by_role("button", name="Trigger", exact=True).click()
            run_id = finished_run(before)

            page.goto(f"{base}/dags/{dag_id}/runs/{run_id}")
            note = page.get_by_text("rows inserted").first
            expect(note).to_be_visible()
            time.sleep(1)  # let the grid settle for the picture
            found["note"] = page.locator("body").inner_text()
            found["run_id"] = run_id
            page.screenshot(path=str(shots / "06-run.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(shots / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    return found
