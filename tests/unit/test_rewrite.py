"""The follow-up rewrite without a model (pgrag.answer.rewrite.heuristic_rewrite) and the
reading of a model's rewrite."""

from __future__ import annotations

import pytest

from pgrag.answer.rewrite import (
    HEURISTIC,
    NO_HISTORY,
    UNCHANGED,
    HistoryTurn,
    clean_reply,
    heuristic_rewrite,
    rewrite_messages,
    standalone_query,
)


def _after(
    question: str, answer: str = "", titles: dict[int, str | None] | None = None
) -> list[HistoryTurn]:
    return [HistoryTurn("user", question), HistoryTurn("assistant", answer, titles=titles)]


@pytest.mark.parametrize(
    ("before", "follow_up", "standalone"),
    [
        # a referring word takes the previous question's subject
        ("Who founded the University of Chicago?", "When was it founded?",
         "When was University of Chicago founded?"),
        ("In what country is Normandy located?", "What is its capital?",
         "What is Normandy's capital?"),
        ("What did Marie Curie discover?", "Who was her husband?",
         "Who was Marie Curie's husband?"),
        ("What did Marie Curie discover?", "Who married her?", "Who married Marie Curie?"),
        ("Where is Lake Orvis?", "What happened there in 1850?",
         "What happened in Lake Orvis in 1850?"),
        # "what about X": the previous question, about X
        ("What was Tesla's birth year?", "What about Edison?", "What was Edison's birth year?"),
        ("Who founded Yale?", "And Harvard?", "Who founded Harvard?"),
        # ... but "what about" a question of its own is that question, not the last one's
        ("When does Alice project Falcon launch?", "What about Bob's Osprey budget?",
         "What about Bob's Osprey budget?"),
        # short and elliptical: the subject is carried along
        ("Who founded Yale University?", "And the mascot?", "And the mascot? (Yale University)"),
        # a new topic, or a question that stands already: unchanged
        ("Who founded Yale University?", "What is the capital of France?",
         "What is the capital of France?"),
        ("Who founded Yale University?", "Is there a law school at Yale University?",
         "Is there a law school at Yale University?"),
        ("Who founded Yale University?", "Is there a law school?", "Is there a law school?"),
    ],
)  # fmt: skip
def test_heuristic(before: str, follow_up: str, standalone: str) -> None:
    assert heuristic_rewrite(follow_up, _after(before)) == standalone


def test_the_cited_source_title_names_the_subject() -> None:
    # The previous question names two things; the answer's cited source is about one of them.
    history = _after(
        "Did the NFL move Super Bowl 50 from Levi's Stadium?",
        "No, it was played there [2].",
        {1: "National Football League", 2: "Super Bowl 50"},
    )
    assert heuristic_rewrite("Who won it?", history) == "Who won Super Bowl 50?"


def test_a_chain_of_follow_ups_keeps_its_subject() -> None:
    history = [
        HistoryTurn("user", "Who founded Lakemont University?"),
        HistoryTurn("assistant", "Anna Verhoef [1]."),
        HistoryTurn("user", "When?", "When? (Lakemont University)"),
        HistoryTurn("assistant", "In 1871 [1]."),
    ]
    assert heuristic_rewrite("Where is it?", history) == "Where is Lakemont University?"


def test_without_history_nothing_is_rewritten() -> None:
    assert standalone_query(" When was it built? ", []).method == NO_HISTORY
    assert standalone_query("When was it built?", []).standalone == "When was it built?"
    r = standalone_query("Who won it?", _after("Who played in Super Bowl 50?"))
    assert (r.standalone, r.method) == ("Who won Super Bowl 50?", HEURISTIC)
    same = standalone_query("What is the capital of France?", _after("Who won Super Bowl 50?"))
    assert same.method == UNCHANGED


class Model:
    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.asked: list[list[dict[str, str]]] = []

    def complete(self, messages: list[dict[str, str]], *, on_token: object = None) -> str:
        self.asked.append(messages)
        return self.reply


def test_a_model_rewrites_and_a_useless_reply_falls_back_to_the_heuristic() -> None:
    history = _after("Who played in Super Bowl 50?", "The Broncos and the Panthers [1][2].")
    model = Model('Standalone question: "Who won Super Bowl 50?"\n')
    r = standalone_query("Who won it?", history, model)
    assert (r.standalone, r.method) == ("Who won Super Bowl 50?", "llm")
    shown = model.asked[0][1]["content"]
    assert "User: Who played in Super Bowl 50?" in shown
    assert "Assistant: The Broncos and the Panthers." in shown  # citation marks left out
    empty = standalone_query("Who won it?", history, Model("  \n"))
    assert (empty.standalone, empty.method) == ("Who won Super Bowl 50?", HEURISTIC)
    assert clean_reply("x" * 2000) is None


def test_the_model_sees_only_the_latest_turns_and_short_answers() -> None:
    history = []
    for i in range(10):
        history += [HistoryTurn("user", f"question {i}?"), HistoryTurn("assistant", "word " * 300)]
    shown = rewrite_messages("last?", history)[1]["content"]
    assert "question 4?" not in shown and "question 9?" in shown
    assert max(len(line) for line in shown.splitlines()) < 420
