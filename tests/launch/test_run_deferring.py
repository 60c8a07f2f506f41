"""The one sweep loop (launch.local.run_deferring): a point another process holds is set aside, and once
the others are done it is waited for here, in the order the points were given."""

from __future__ import annotations

from nfeval.launch import local
from nfeval.launch.jobs import LaunchPoint


def _point(name: str, held: bool, wait: bool = True):
    """The point's result, or None while "another process" holds it and the call does not wait."""
    return None if held and not wait else f"{name}{' waited' if wait else ''}"


def test_held_points_are_waited_for_at_the_end_in_their_order():
    held = {"b", "d"}
    points = [LaunchPoint(n, _point, (n, n in held), n, kwargs={"wait": False}) for n in "abcd"]
    seen, said = [], []
    local.run_deferring(
        points,
        lambda p, result: seen.append((p.name, result)),
        before_waiting=lambda aside: said.append([p.name for p in aside]),
    )
    assert seen == [("a", "a"), ("c", "c"), ("b", "b waited"), ("d", "d waited")]
    assert said == [["b", "d"]]


def test_nothing_held_waits_for_nothing():
    seen, said = [], []
    points = [LaunchPoint(n, _point, (n, False), n, kwargs={"wait": False}) for n in "ab"]
    local.run_deferring(points, lambda p, r: seen.append(r), before_waiting=said.append)
    assert seen == ["a", "b"] and said == []
