"""service.unfinished: at most ``cap`` unfinished names held per owning uid; the rest ignored by
rescans until an event names them; what rescans no longer find is forgotten (issue 48)."""

from __future__ import annotations

from attnkit.service.unfinished import Unfinished


def test_an_owners_names_beyond_the_cap_are_ignored_and_others_are_not_charged() -> None:
    pending = Unfinished(cap=3, recheck_seconds=30.0)
    assert [pending.hold(f"a{n}", 1001, 0.0) for n in range(5)] == [True, True, True, False, False]
    assert pending.hold("b0", 1002, 0.0), "another uid has a cap of its own"
    assert len(pending) == 4 and pending.ignored == {"a3", "a4"} and pending.ignored_by[1001] == 2
    assert pending.hold("a0", 1001, 5.0), "a name held is seen again, not charged twice"
    assert pending.skip("a3", 5.0) and pending.skip("a0", 6.0) and not pending.skip("a0", 40.0)
    assert not pending.skip("unknown", 0.0)


def test_a_name_taken_in_frees_its_owners_place_and_an_event_still_looks_at_an_ignored_one() -> None:
    pending = Unfinished(cap=1, recheck_seconds=30.0)
    assert pending.hold("a0", 7, 0.0) and not pending.hold("a1", 7, 0.0)
    pending.pop("a0")  # finished: taken in
    assert pending.hold("a1", 7, 1.0), "looked at again (its event), it is held now"
    assert "a1" not in pending.ignored and pending.held_by[7] == 1
    assert pending.hold("gone", None, 1.0) and len(pending) == 1, "a name that is gone is not held"


def test_a_rescan_forgets_ignored_names_it_no_longer_finds_and_clear_forgets_all() -> None:
    pending = Unfinished(cap=0, recheck_seconds=30.0)
    for name in ("x", "y", "z"):
        assert not pending.hold(name, 5, 0.0)
    pending.rescanned()  # ignored since the last rescan ended: kept
    assert pending.ignored == {"x", "y", "z"}
    assert pending.skip("x", 1.0)  # the next rescan finds only x
    pending.rescanned()
    assert pending.ignored == {"x"}
    pending.clear()
    assert not pending.ignored and not len(pending) and not pending.skip("x", 1.0)
