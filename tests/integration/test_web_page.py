"""The web page at ``/`` in a real browser: Debian's Chromium driven by Playwright, against the
real service (uvicorn, a test database with documents ingested, the real embedding model) and
a local fake OpenAI-compatible model server that streams its answer a word at a time.

It asserts what a user sees: the collections in the picker, the answer streaming in, citations
that open the right passage and source, the sources panel, an abstention with its reason,
search-only results, a second turn of the conversation, untrusted document text shown as text,
and the prompt for a key on a 401. Screenshots go to ``$PGRAG_TEST_ARTIFACTS`` (default: the
test's temporary directory).

Needs ``apt-get install -y chromium`` and ``pip install playwright`` (Playwright's own browser
download is not used: it is launched with ``executable_path``)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

import pgrag
from pgrag.config import Settings
from pgrag.service.keys import create_key
from tests.fakes import LLMServer
from tests.serving import served

CHROMIUM = Path("/usr/bin/chromium")

DOCS = {
    "refunds.md": (
        "# Refund policy\n\n## Monthly plans\n\n"
        "Monthly subscriptions can be refunded within 14 days of the charge.\n"
    ),
    "payments.md": (
        "# Payments\n\nMoney paid back reaches the original payment method within 5 to 10"
        " business days.\n"
    ),
    "security.md": (
        "# Security\n\n## Passwords\n\n"
        "Passwords must be at least 14 characters long and are rotated every year.\n"
    ),
    "office.md": (
        "# Office\n\nThe Lisbon office opens at 8:00 and closes at 18:00 on weekdays."
        " Bicycles are parked in the inner courtyard.\n"
    ),
    # Documents are untrusted: this one tries to run script in the page that shows it.
    "vendor.md": (
        '# Vendor sheet\n\nThe glitter supplier quotes <img src=x onerror="window.pwned=1">'
        " and <script>window.pwned=2</script> per kilogram of glitter.\n"
    ),
}

# What the fake model knows: a question naming the key finds the source holding the fact.
# The follow-up's key comes first: a rewritten follow-up may name refunds too.
FACTS = {
    "business days": "5 to 10 business days",
    "refund": "refunded within 14 days",
    "password": "at least 14 characters",
}
SOURCE = re.compile(r"^\[(\d+)\][^\n]*\n<<<\n(.*?)\n>>>", re.M | re.S)

# Records each piece of text the page appends to an answer while it is still streaming.
RECORD_STREAM = """
window.streamed = [];
new MutationObserver((records) => {
  for (const r of records) {
    const busy = r.target.closest && r.target.closest('.answer[aria-busy="true"]');
    if (!busy || !r.target.classList.contains('answer-text')) continue;
    for (const n of r.addedNodes) if (n.nodeType === 3) window.streamed.push(n.textContent);
  }
}).observe(document, {childList: true, subtree: true});
"""


def oracle(body: dict[str, Any]) -> str:
    """Answers from the numbered sources in the prompt, citing the one that holds the fact the
    question asks for; "I don't know" when none does. A request without sources (a follow-up
    being rewritten) gets its last line back."""
    prompt = body["messages"][-1]["content"]
    sources = SOURCE.findall(prompt)
    if not sources:
        return prompt.strip().splitlines()[-1]
    question = prompt.rsplit("Question:", 1)[-1].lower()
    for key, fact in FACTS.items():
        if key in question:
            for n, text in sources:
                if fact in text:
                    return f"The policy says {fact} [{n}]."
    return "I don't know based on the sources."


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"Chromium is not installed at {CHROMIUM}: apt-get install -y chromium"
            " (the web page is tested in Debian's Chromium through Playwright)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ModuleNotFoundError:
        pytest.fail(
            "the playwright package is missing: pip install playwright (not playwright install)"
        )
    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    from playwright.sync_api import expect

    expect.set_options(timeout=90_000)  # a busy 2-core machine embeds slowly; no timing asserted
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(90_000)
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(str(err)))
    yield tab
    context.close()
    assert errors == [], f"the page's script failed: {errors}"


@pytest.fixture
def shots(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    root = Path(os.environ.get("PGRAG_TEST_ARTIFACTS") or tmp_path)
    root.mkdir(parents=True, exist_ok=True)

    def shot(tab: Any, step: str) -> None:
        tab.screenshot(path=str(root / f"{request.node.name}-{step}.png"), full_page=True)

    return shot


@pytest.fixture
def handbook(db: Any, tmp_path: Path) -> Any:
    folder = tmp_path / "handbook"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    pgrag.ingest(db, [folder], collection="handbook")
    other = tmp_path / "other"
    other.mkdir()
    (other / "note.md").write_text("# Note\n\nAn unrelated note about tea.\n")
    pgrag.ingest(db, [other], collection="notes")
    return db


@pytest.fixture
def llm() -> Iterator[LLMServer]:
    server = LLMServer()
    server.answer = oracle
    yield server
    server.close()


def asks(tab: Any) -> list[dict[str, Any]]:
    """The bodies of the page's POST /v1/ask requests, recorded as they are sent."""
    bodies: list[dict[str, Any]] = []

    def seen(request: Any) -> None:
        if request.method == "POST" and request.url.endswith("/v1/ask"):
            bodies.append({"json": json.loads(request.post_data), "headers": request.headers})

    tab.on("request", seen)
    return bodies


def test_the_page_asks_cites_searches_and_keeps_the_conversation(
    handbook: Any, dsn: str, llm: LLMServer, page: Any, shots: Any
) -> None:
    from playwright.sync_api import expect

    settings = Settings(llm_base_url=llm.url, llm_model="test", min_confidence="off")
    first_q = "How long do I have to get a refund on a monthly plan?"
    second_q = "And within how many business days is the money back?"
    absent_q = "Who won the football world cup in 1998?"
    page.add_init_script(RECORD_STREAM)
    sent = asks(page)
    with served(dsn, settings, no_auth=True) as s:
        # What the service answers, asked directly: the page must show the same.
        expected = httpx.post(
            f"{s.url}/v1/ask", json={"question": first_q, "collection": "handbook"}, timeout=120
        ).json()
        assert not expected["abstained"], expected["reason"]
        listing = httpx.get(f"{s.url}/v1/collections").json()["collections"]

        response = page.goto(s.url + "/")
        assert response.status == 200
        assert "script-src 'self'" in response.headers["content-security-policy"]

        # The picker lists the collections the caller can read.
        picker = page.get_by_label("Collection")
        expect(picker.locator("option")).to_have_count(len(listing))
        names = picker.locator("option").evaluate_all("os => os.map(o => o.value)")
        assert sorted(names) == sorted(c["name"] for c in listing) == ["handbook", "notes"]
        picker.select_option("handbook")

        # Ask: the answer streams in, then the checked answer with its citations.
        page.get_by_role("textbox", name="Question").fill(first_q)
        page.get_by_role("button", name="Ask", exact=True).click()
        turn = page.locator(".turn").nth(0)
        cited = expected["citations"][0]
        source = {x["n"]: x for x in expected["sources"]}[cited["n"]]
        citation = turn.get_by_role("button", name=f"Citation {cited['n']}:")
        expect(citation).to_be_visible()
        expect(turn.locator(".answer-text")).to_have_text(expected["answer"])
        streamed = page.evaluate("window.streamed")
        assert len(streamed) > 1 and "".join(streamed) == expected["raw_answer"]
        assert sent[0]["json"]["stream"] is True
        assert "text/event-stream" in sent[0]["headers"]["accept"]
        assert sent[0]["json"]["conversation_id"] == "new"
        shots(page, "1-answer")

        # The sources panel lists every source the answer was given, the cited one marked.
        panel = page.locator("#source-list > li")
        expect(panel).to_have_count(len(expected["sources"]))
        for item, want in zip(panel.all(), expected["sources"], strict=True):
            assert item.locator(".n").inner_text().strip() == f"[{want['n']}]"
            assert item.locator(".source").inner_text() == want["source"]
        expect(page.locator(f'#source-list > li[data-n="{cited["n"]}"].cited')).to_have_count(1)

        # A citation opens its passage and its source.
        citation.click()
        passage = page.get_by_role("region", name=re.compile("Cited passage"))
        expect(passage).to_be_visible()
        expect(page.locator("#passage-n")).to_have_text(f"[{cited['n']}]")
        expect(page.locator("#passage-text")).to_have_text(source["text"])
        expect(page.locator("#passage-source")).to_have_text(cited["source"])
        assert cited["source"].endswith("refunds.md") and "within 14 days" in source["text"]
        expect(page.locator("#passage-title")).to_have_text(cited["title"] or "")
        shots(page, "2-passage")

        # A second turn: the conversation id the answer returned goes back with it.
        page.get_by_role("textbox", name="Question").fill(second_q)
        page.get_by_role("textbox", name="Question").press("Enter")
        second = page.locator(".turn").nth(1)
        expect(second.get_by_role("button", name=re.compile(r"^Citation \d+:"))).not_to_have_count(
            0
        )
        expect(page.locator(".turn")).to_have_count(2)
        expect(page.locator(".turn .question").nth(0)).to_contain_text(first_q)
        expect(second.locator(".answer-text")).to_contain_text("5 to 10 business days")
        assert "5 to 10 business days" not in source["text"]  # another passage than turn 1's
        stored = json.loads(page.evaluate("sessionStorage.getItem('pgrag.conversation')"))
        first_id = stored["turns"][0]["answer"]["conversation_id"]
        assert first_id and sent[1]["json"]["conversation_id"] == first_id
        assert stored["turns"][1]["answer"]["conversation_id"] == first_id
        second.get_by_role("button", name=re.compile(r"^Citation \d+:")).first.click()
        expect(page.locator("#passage-text")).to_contain_text("5 to 10 business days")
        expect(page.locator("#passage-source")).to_have_text(re.compile(r"payments\.md$"))
        # The first turn's citation still opens the first turn's passage.
        citation.click()
        expect(page.locator("#passage-text")).to_have_text(source["text"])
        expect(page.locator("#passage-source")).to_have_text(cited["source"])
        shots(page, "3-second-turn")

        # A new conversation, then a question the documents cannot answer: an abstention with
        # the reason the service gives.
        page.get_by_role("button", name="New conversation").click()
        expect(page.locator(".turn")).to_have_count(0)
        page.get_by_role("textbox", name="Question").fill(absent_q)
        page.get_by_role("button", name="Ask", exact=True).click()
        abstention = page.locator(".turn .abstention")
        expect(abstention).to_be_visible()
        assert sent[-1]["json"]["conversation_id"] == "new"
        declined = httpx.post(
            f"{s.url}/v1/ask", json={"question": absent_q, "collection": "handbook"}, timeout=120
        ).json()
        assert declined["abstained"] and declined["reason"]
        expect(abstention).to_contain_text(declined["reason"])
        expect(page.locator(".turn .answer-text")).to_have_text(declined["answer"])
        shots(page, "4-abstention")

        # Search only: the results the service finds, listed in its order, no model asked.
        asked_before = len(llm.requests)
        page.get_by_label("Search only").check()
        page.get_by_role("textbox", name="Question").fill("glitter supplier per kilogram")
        page.get_by_role("button", name="Search", exact=True).click()
        found = httpx.post(
            f"{s.url}/v1/search",
            json={"query": "glitter supplier per kilogram", "collection": "handbook", "k": 10},
        ).json()["results"]
        results = page.locator("#results > li.result")
        expect(results).to_have_count(len(found))
        for item, want in zip(results.all(), found, strict=True):
            assert item.locator(".source").inner_text() == want["source"]
            assert item.locator(".passage").inner_text() == want["text"]
        assert len(llm.requests) == asked_before
        # The vendor sheet's markup is shown as text; none of it ran or became an element.
        assert found[0]["source"].endswith("vendor.md")
        expect(results.first.locator(".passage")).to_contain_text(
            '<img src=x onerror="window.pwned=1">'
        )
        assert page.locator("#results img, #results script").count() == 0
        assert page.evaluate("window.pwned") is None
        shots(page, "5-search")


def test_without_a_key_the_page_asks_for_one(
    handbook: Any, dsn: str, page: Any, shots: Any
) -> None:
    from playwright.sync_api import expect

    calls: list[dict[str, str]] = []
    page.on(
        "request",
        lambda r: calls.append(r.headers) if r.url.endswith("/v1/collections") else None,
    )
    with served(dsn) as s:  # credentials required
        response = page.goto(s.url + "/")
        assert response.status == 200  # the page itself needs none
        alert = page.get_by_role("alert")
        expect(alert).to_contain_text("needs an API key")
        key = page.get_by_role("textbox", name="API key")
        expect(key).to_be_focused()
        expect(key).to_have_attribute("aria-invalid", "true")
        assert "authorization" not in calls[0]
        shots(page, "1-key-prompt")

        # A key the service does not know: sent as a bearer token, and said to be refused.
        key.fill("pgrag_deadbeef_notakey")
        page.get_by_role("button", name="Use key").click()
        expect(alert).to_contain_text("was not accepted")
        assert calls[-1]["authorization"] == "Bearer pgrag_deadbeef_notakey"
        stored = page.evaluate("sessionStorage.getItem('pgrag.key')")
        assert stored == "pgrag_deadbeef_notakey"

        # Asking anyway cannot pick a collection, and says why.
        page.get_by_role("textbox", name="Question").fill("How long is the refund window?")
        page.get_by_role("button", name="Ask", exact=True).click()
        expect(alert).to_contain_text("Pick a collection")
        assert page.locator(".turn").count() == 0
        shots(page, "2-key-refused")

        # A real key: the collections load, the notice goes, and a search runs with it.
        _, real = create_key(handbook, principals=["alice"])
        key.fill(real)
        page.get_by_role("button", name="Use key").click()
        expect(page.get_by_label("Collection").locator('option[value="handbook"]')).to_have_count(1)
        expect(alert).to_be_hidden()
        assert calls[-1]["authorization"] == f"Bearer {real}"
        page.get_by_label("Collection").select_option("handbook")
        page.get_by_label("Search only").check()
        page.get_by_role("textbox", name="Question").fill("glitter supplier")
        page.get_by_role("button", name="Search", exact=True).click()
        expect(page.locator("#results > li.result").first).to_contain_text("glitter")
        shots(page, "3-key-accepted")

        page.get_by_role("button", name="Forget key").click()
        assert page.evaluate("sessionStorage.getItem('pgrag.key')") is None
        expect(alert).to_contain_text("needs an API key")
        assert "authorization" not in calls[-1]
