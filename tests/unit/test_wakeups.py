"""ParkedTurns: the claim loop's wait shortened to the next turn this process parked."""

import datetime

from executions.worker.wakeups import TURN_LAG_SECONDS, ParkedTurns


def _at(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)


def test_no_turn__the_whole_poll():
    assert ParkedTurns().wait(0.5) == 0.5


def test_a_turn_before_the_poll__waits_until_just_after_it():
    turns = ParkedTurns()
    turns.note(_at(0.2))
    turns.note(_at(0.1))
    waited = turns.wait(0.5)
    assert 0.1 - 0.05 < waited <= 0.1 + TURN_LAG_SECONDS
    assert turns.wait(0.05) == 0.05  # the poll is sooner than any turn


def test_turns_that_came__one_claim_now_for_all_of_them():
    turns = ParkedTurns()
    turns.note(_at(-0.3))
    turns.note(_at(-0.1))
    turns.note(_at(30.0))
    assert turns.wait(0.5) == 0.0
    assert turns.wait(0.5) == 0.5  # both came and were served; the next is after the poll
