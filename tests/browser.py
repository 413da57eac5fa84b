"""Drive Airflow 3.3's UI with Playwright and Debian's Chromium (no browser download), as a
person would: used by tests/test_airflow_e2e.py::test_the_ui_in_a_browser.

Selectors are the UI's own accessible names (aria labels and roles), as Airflow 3.3 renders
them: "Dag Import Error" (the badge on the Dags page), "Dag Docs" (the book icon on a DAG's
page), "Show Graph (Press g)", "Trigger Dag" (then the dialog's "Run Parameters" and "Trigger"),
"Edit note" (on a run's page: opens the whole note, rendered), a task's extra links on its
Details tab, the plugin's "Views" tab of a DAG (``/dags/<dag>/plugin/dbsp-views``, an iframe).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

TIMEOUT_MS = 90_000  # a loaded 2-core machine renders slowly


def drive_the_ui(base: str, user: str, password: str, dag_id: str, shots: Path, chromium: str,
                 args: list[str], finished_run: Callable[[set[str]], str], known_runs: Callable[[], set[str]]
                 ) -> dict:
    """Log in, look at the Dags list, the DAG's docs and graph, trigger a run from the dialog and
    read its page; returns what was found (note text, docs image, graph) and saves screenshots."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)  # its default is 5 s
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
            page.get_by_placeholder("Search Dags").first.fill(dag_id)
            listed = page.get_by_role("link", name=re.compile(rf"^{re.escape(dag_id)}\b")).first
            expect(listed).to_be_visible()
            found["dag_list_name"] = listed.inner_text()  # the circuit's name and its description
            badge = page.get_by_role("button", name="Dag Import Error")
            found["import_errors_badge"] = badge.count() > 0
            page.screenshot(path=str(shots / "01-dags.png"))
            if found["import_errors_badge"]:
                badge.click()
                dialog = page.get_by_role("dialog")
                dialog.get_by_text("dbsp_circuit_errors.py").first.click()  # unfold the message
                expect(dialog.get_by_text("dbsp validate", exact=False).first).to_be_visible()
                page.screenshot(path=str(shots / "02-import-errors.png"))
                page.keyboard.press("Escape")

            page.goto(f"{base}/dags/{dag_id}")
            page.get_by_role("button", name="Dag Docs").click()
            dialog = page.get_by_role("dialog")
            link = dialog.get_by_role("link", name="Open the picture of the incremental circuit")
            expect(link).to_be_visible()
            found["docs_image"] = link.get_attribute("href")
            found["docs_text"] = dialog.inner_text()
            found["docs_images_inline"] = dialog.locator("img").count()
            page.screenshot(path=str(shots / "03-docs.png"))
            page.keyboard.press("Escape")
            shown = page.request.get(base + found["docs_image"])  # what the link opens
            found["docs_full_size"] = (shown.status, shown.headers.get("content-type", ""), shown.text())
            # the picture as the link shows it: the smallest label's size on screen, in CSS pixels
            page.goto(base + found["docs_image"])
            found["docs_font_px"] = page.evaluate(
                "() => { const svg = document.documentElement;"
                " const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;"
                " return Math.min(...[...document.querySelectorAll('text')].map("
                "t => parseFloat(getComputedStyle(t).fontSize) * scale)); }")
            page.screenshot(path=str(shots / "03b-circuit.png"))
            page.goto(f"{base}/dags/{dag_id}")

            page.get_by_role("button", name="Show Graph (Press g)").click()
            graph = page.locator(".react-flow")
            expect(graph.get_by_text("timestep", exact=True)).to_be_visible()
            found["graph"] = graph.inner_text()
            page.screenshot(path=str(shots / "04-graph.png"))

            before = known_runs()
            page.get_by_role("button", name="Trigger Dag").first.click()
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("Run Parameters")).to_be_visible()
            # Airflow 3.3 always draws the run/backfill choice; the theme hides it when greyed out
            backfill = dialog.locator("label:has(input[value=backfill])")
            found["backfill_drawn"] = backfill.count() > 0
            found["backfill_visible"] = found["backfill_drawn"] and backfill.first.is_visible()
            found["backfill_offered"] = found["backfill_visible"] and backfill.first.locator("input").is_enabled()
            page.screenshot(path=str(shots / "05-trigger.png"))
            dialog.get_by_role("button", name="Trigger", exact=True).click()
            run_id = finished_run(before)

            page.goto(f"{base}/dags/{dag_id}/runs/{run_id}")
            preview = page.get_by_text("committed:").first  # the note's first line, on the run page
            expect(preview).to_be_visible()
            found["note_preview"] = preview.inner_text()
            page.screenshot(path=str(shots / "06-run.png"))
            page.get_by_role("button", name="Edit note").first.click()  # the whole note, rendered
            dialog = page.get_by_role("dialog")
            expect(dialog.get_by_text("rows inserted").first).to_be_visible()
            found["note"] = dialog.inner_text()
            found["run_id"] = run_id
            page.screenshot(path=str(shots / "07-note.png"))
            href = dialog.get_by_role("link", name="quality report").get_attribute("href")
            found["quality_link"] = href
            page.goto(base + href)  # the plugin's page, behind the same login (the session cookie)
            expect(page.get_by_role("heading", name="Quality reports")).to_be_visible()
            found["quality_page"] = page.locator("body").inner_text()
            page.screenshot(path=str(shots / "08-quality-report.png"))

            # the DAG's "Views" tab (the plugin's page in a frame): the views' asset events unfolded
            page.goto(f"{base}/dags/{dag_id}/plugin/dbsp-views")
            frame = page.frame_locator("iframe").first
            expect(frame.get_by_role("heading", name=f"Views of {dag_id}")).to_be_visible()
            found["views_tab"] = frame.locator("body").inner_text()
            page.screenshot(path=str(shots / "08b-views.png"))

            # the task's extra link: under "Extra Links" on its Details tab (the log, on the first
            # tab, also says "quality report", so match the link itself)
            page.goto(f"{base}/dags/{dag_id}/runs/{run_id}/tasks/timestep/details")
            link = page.get_by_role("link", name="Quality report", exact=True).first
            expect(link).to_be_visible()
            found["extra_link"], found["extra_link_href"] = link.inner_text(), link.get_attribute("href")
            page.screenshot(path=str(shots / "09-commit-task.png"))
        except Exception:
            page.screenshot(path=str(shots / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    return found
