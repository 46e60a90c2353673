"""The node's lease ledger (decision 0022), pure: credits, reservations, held attempts and the
node's budget, with its invariants checked after every operation — by hand for the cases that
matter, and under random sequences of operations."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from orbit_server.gateway.ledger import Account, Held, LeaseLedger, LedgerError, Reservation


def attempts(*ids: str) -> dict[tuple[str, int], Held]:
    return {(task_id, 1): Held("q") for task_id in ids}


def test_a_claim_takes_free_slots_and_returns_what_it_did_not_lease() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=5, max_credits=10)
    reservation = ledger.reserve(account, 10)
    assert reservation is not None and reservation.slots == 5
    assert (account.free, account.reserved, ledger.inflight) == (0, 5, 5)
    assert ledger.reserve(account, 1) is None  # nothing left to take
    assert ledger.deliver(reservation, attempts("a", "b"))
    assert (account.free, account.reserved, len(account.held), ledger.inflight) == (3, 0, 2, 2)
    ledger.check()


def test_a_reservation_ends_exactly_once() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=2, max_credits=10)
    reservation = ledger.reserve(account, 1)
    assert reservation is not None
    ledger.give_back(reservation)
    with pytest.raises(LedgerError):
        ledger.give_back(reservation)
    with pytest.raises(LedgerError):
        ledger.deliver(reservation, {})
    assert (account.free, ledger.inflight) == (2, 0)
    ledger.check()


def test_a_reservation_delivers_no_more_than_it_reserved() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=1, max_credits=10)
    reservation = ledger.reserve(account, 1)
    assert reservation is not None
    with pytest.raises(LedgerError):
        ledger.deliver(reservation, attempts("a", "b"))


def test_the_node_budget_bounds_reservations_but_not_adopted_attempts() -> None:
    ledger = LeaseLedger(max_leases=3)
    first = ledger.open("s1", capacity=2, max_credits=10)
    second = ledger.open("s2", capacity=2, max_credits=10)
    a = ledger.reserve(first, 2)
    b = ledger.reserve(second, 2)
    assert a is not None and b is not None and (a.slots, b.slots) == (2, 1)
    assert ledger.budget == 0 and second.free == 1
    ledger.adopt(second, [("old", 3)])  # leased already: counted, over the budget
    assert ledger.inflight == 4 and ledger.budget == 0
    ledger.give_back(a)
    assert ledger.budget == 1  # 3 − the reservation of s2 − the adopted attempt
    ledger.check()


def test_credits_keep_free_slots_under_the_cap() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=3, max_credits=4)
    assert ledger.grant(account, 5) == 1
    assert account.free == 4
    ledger.check()


def test_a_reservation_that_ends_after_its_session_closed_holds_nothing() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=4, max_credits=10)
    first = ledger.reserve(account, 2)
    assert first is not None and ledger.deliver(first, attempts("a"))
    claim = ledger.reserve(account, 2)
    assert claim is not None
    assert ledger.close(account) == [("a", 1)]
    assert ledger.inflight == 2  # the claim in flight still counts until it ends
    ledger.check()
    assert not ledger.deliver(claim, attempts("b"))  # the caller gives the lease back
    assert ledger.inflight == 0 and list(ledger.accounts()) == []
    assert ledger.settle(account, ("a", 1)) is None  # a late answer settles nothing
    assert ledger.close(account) == []
    ledger.check()
    again = ledger.open("s1", capacity=1, max_credits=10)  # the id is free again
    assert ledger.reserve(again, 1) is not None


def test_an_attempt_settles_once() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=1, max_credits=10)
    reservation = ledger.reserve(account, 1)
    assert reservation is not None
    ledger.deliver(reservation, {("a", 1): Held("q", eager=True)})
    held = ledger.settle(account, ("a", 1))
    assert held is not None and held.eager and held.queue == "q"
    assert ledger.settle(account, ("a", 1)) is None
    assert (account.capacity, ledger.inflight) == (0, 0)  # the worker's credit brings it back
    ledger.check()


def test_an_attempt_two_heartbeats_did_not_list_is_given_up() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=2, max_credits=10)
    reservation = ledger.reserve(account, 2)
    assert reservation is not None
    ledger.deliver(reservation, attempts("a", "b"))
    assert ledger.unlisted(account, {("b", 1)}) == []
    assert ledger.unlisted(account, {("a", 1), ("b", 1)}) == []  # listed again: count anew
    assert ledger.unlisted(account, {("b", 1)}) == []
    assert [key for key, _ in ledger.unlisted(account, {("b", 1)})] == [("a", 1)]
    assert list(account.held) == [("b", 1)] and ledger.inflight == 1
    ledger.check()


def test_a_session_is_opened_once_and_used_only_while_open() -> None:
    ledger = LeaseLedger(max_leases=100)
    account = ledger.open("s1", capacity=1, max_credits=10)
    with pytest.raises(LedgerError):
        ledger.open("s1", capacity=1, max_credits=10)
    other = LeaseLedger(max_leases=100)
    with pytest.raises(LedgerError):
        other.reserve(account, 1)  # an account of another ledger
    ledger.close(account)
    assert ledger.reserve(account, 1) is None and ledger.grant(account, 1) == 0
    with pytest.raises(LedgerError):
        ledger.adopt(account, [("a", 1)])


# -- random sequences ---------------------------------------------------------------------------


class LedgerMachine(RuleBasedStateMachine):
    """Random interleavings of what connections, claims and direct dispatch do; after every
    step the ledger's own check and a model kept here must agree."""

    accounts = Bundle("accounts")
    reservations = Bundle("reservations")

    def __init__(self) -> None:
        super().__init__()
        self.ledger = LeaseLedger(max_leases=12)
        self.sessions = 0
        self.tasks = 0
        self.ended: set[int] = set()  # ids of reservations that ended
        self.open_reservations: dict[int, Reservation] = {}

    @rule(target=accounts, capacity=st.integers(0, 6), cap=st.integers(0, 8))
    def connect(self, capacity: int, cap: int) -> Account:
        self.sessions += 1
        return self.ledger.open(f"s{self.sessions}", capacity=capacity, max_credits=cap)

    @rule(account=accounts, n=st.integers(0, 5))
    def credit(self, account: Account, n: int) -> None:
        free = account.free
        added = self.ledger.grant(account, n)
        expected = max(free, min(free + n, account.max_credits))
        assert added >= 0 and (account.closed or account.free == expected)

    @rule(target=reservations, account=accounts, most=st.integers(0, 8))
    def reserve(self, account: Account, most: int) -> Reservation | None:
        before = (account.free, self.ledger.budget)
        reservation = self.ledger.reserve(account, most)
        if reservation is None:
            assert account.closed or min(most, *before) == 0
        else:
            assert reservation.slots == min(most, *before)
            self.open_reservations[id(reservation)] = reservation
        assert self.ledger.inflight <= self.ledger.max_leases or self.adopted_over_budget()
        return reservation

    def adopted_over_budget(self) -> bool:
        return any(h.queue == "" for a in self.ledger.accounts() for h in a.held.values())

    @rule(reservation=consumes(reservations), share=st.floats(0, 1))
    def deliver(self, reservation: Reservation | None, share: float) -> None:
        if reservation is None:
            return
        count = int(reservation.slots * share)
        leased = {}
        for _ in range(count):
            self.tasks += 1
            leased[(f"t{self.tasks}", 1)] = Held("q", eager=self.tasks % 2 == 0)
        delivered = self.ledger.deliver(reservation, leased)
        assert delivered is not reservation.account.closed
        self.end(reservation)

    @rule(reservation=consumes(reservations))
    def give_back(self, reservation: Reservation | None) -> None:
        if reservation is None:
            return
        self.ledger.give_back(reservation)
        self.end(reservation)

    def end(self, reservation: Reservation) -> None:
        assert id(reservation) not in self.ended
        self.ended.add(id(reservation))
        del self.open_reservations[id(reservation)]

    @rule(account=accounts, pick=st.integers(0, 100))
    def settle(self, account: Account, pick: int) -> None:
        keys = list(account.held)
        if not keys:
            assert self.ledger.settle(account, ("none", 1)) is None
            return
        key = keys[pick % len(keys)]
        assert self.ledger.settle(account, key) is not None
        assert self.ledger.settle(account, key) is None

    @rule(account=accounts, n=st.integers(0, 3))
    def adopt(self, account: Account, n: int) -> None:
        if account.closed:
            return
        self.tasks += 1
        self.ledger.adopt(account, [(f"old{self.tasks}", k) for k in range(n)])

    @rule(account=accounts, keep=st.floats(0, 1))
    def heartbeat(self, account: Account, keep: float) -> None:
        keys = list(account.held)
        listed = set(keys[: int(len(keys) * keep)])
        gone = {key for key, _ in self.ledger.unlisted(account, listed)}
        assert not gone & listed and not gone & set(account.held)

    @precondition(lambda self: self.sessions > 0)
    @rule(account=accounts)
    def disconnect(self, account: Account) -> None:
        held = set(account.held)
        assert set(self.ledger.close(account)) == held
        assert account.free == 0 and not account.held

    @invariant()
    def consistent(self) -> None:
        self.ledger.check()
        expected = sum(r.slots for r in self.open_reservations.values()) + sum(
            len(a.held) for a in self.ledger.accounts()
        )
        assert self.ledger.inflight == expected
        for account in self.ledger.accounts():
            assert account.free >= 0 and account.reserved >= 0


LedgerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=40,
                                           deadline=None)  # fmt: skip
test_ledger_invariants_hold_under_random_operations = LedgerMachine.TestCase
