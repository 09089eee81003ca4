"""The dashboard's parsing modules run in Chromium itself: the SSE parser, resuming with Last-Event-ID
against the real stream, ANSI handling and number formatting."""

from __future__ import annotations

from typing import Any

from app.core.config import Settings
from tests.dashboard import data
from tests.dashboard.conftest import Dashboard

PARSE_CHUNKS = """async (chunks) => {
  const { SseParser } = await import('/dashboard/js/sse.js');
  const events = [];
  const parser = new SseParser((event) => events.push(event));
  for (const chunk of chunks) parser.push(chunk);
  return { events, lastEventId: parser.lastEventId, retryMs: parser.retryMs };
}"""

FOLLOW = """async ([url, lastEventId]) => {
  const { followSse } = await import('/dashboard/js/sse.js');
  return await new Promise((resolve) => {
    const events = [];
    followSse(url, {
      lastEventId,
      onEvent: (event) => events.push(event),
      onStatus: (status) => { if (status === 'closed') resolve(events); },
    });
  });
}"""


def loaded(dashboard: Dashboard) -> Any:
    dashboard.open("#/jobs")
    dashboard.page.wait_for_selector("[data-page=jobs]")
    return dashboard.page


def test_sse_parser_handles_split_chunks_crlf_comments_and_multiline_data(dashboard: Dashboard) -> None:
    page = loaded(dashboard)
    stream = (
        "retry: 1500\r\n\r\n: keep-alive\n\n"
        'id: 7\nevent: line\ndata: {"seq": 7}\n\n'
        "data: first\ndata: second\r\n\r\n"
        "id: 9\nevent: end\ndata: {}\n\n"
        "id: 10\n\n"  # an id with no data moves the resume point and dispatches nothing
    )
    for size in (1, 3, 7, len(stream)):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        result = page.evaluate(PARSE_CHUNKS, chunks)
        assert result["events"] == [
            {"type": "line", "data": '{"seq": 7}', "id": "7"},
            {"type": "message", "data": "first\nsecond", "id": "7"},
            {"type": "end", "data": "{}", "id": "9"},
        ], size
        assert result["lastEventId"] == "10"
        assert result["retryMs"] == 1500
    assert dashboard.errors == []


def test_following_resumes_after_the_last_event_id(dashboard: Dashboard, settings: Settings) -> None:
    job = data.make_job(settings, "selftest", "succeeded", progress=1.0)
    data.add_log(settings, job, [f"line {i}" for i in range(1, 31)])
    page = loaded(dashboard)
    events = page.evaluate(FOLLOW, [f"/v1/jobs/{job}/logs/stream", "20"])
    lines = [e for e in events if e["type"] == "line"]
    assert [e["id"] for e in lines] == [str(seq) for seq in range(21, 31)]
    assert events[-1]["type"] == "end"
    assert dashboard.errors == []


def test_a_stream_that_answers_404_is_not_retried(dashboard: Dashboard) -> None:
    page = loaded(dashboard)
    missing = "00000000-0000-0000-0000-000000000000"
    assert page.evaluate(FOLLOW, [f"/v1/jobs/{missing}/logs/stream", None]) == []


def test_ansi_segments_and_number_format(dashboard: Dashboard) -> None:
    page = loaded(dashboard)
    segments = page.evaluate(
        """async (text) => (await import('/dashboard/js/ansi.js')).ansiSegments(text)""",
        "\x1b[1mBold\x1b[22m \x1b[91mbright\x1b[39m\x1b[2K done\x00",
    )
    assert segments == [
        {"text": "Bold", "className": "ansi-bold"},
        {"text": " ", "className": ""},
        {"text": "bright", "className": "ansi-bright-red"},
        {"text": " done", "className": ""},
    ]
    formatted = page.evaluate(
        """async (values) => values.map((await import('/dashboard/js/charts.js')).formatValue)""",
        [3e-5, 0.123456, 2.5, 41234.6, 0, 2.5e7],
    )
    assert formatted == ["3.0e-5", "0.1235", "2.5", "41,235", "0", "2.5e+7"]
