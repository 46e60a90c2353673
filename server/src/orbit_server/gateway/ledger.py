"""The node's lease ledger (decision 0022): for each worker session connected to this node, its
free credits, the slots reserved for a claim or a direct dispatch in flight, and the attempts
it holds (delivered and not yet ended); and, over all of them, the node's lease budget
(``ORBIT_NODE_MAX_LEASES``). One object, and the only one that changes these counts, so that
they are kept together and checked together:

- no count is ever negative;
- for every session, ``free + reserved + len(held) == capacity``: ``capacity`` is the window
  the worker has opened — its credits (``hello.capacity``, then ``credit`` frames) and the
  attempts it took over from an earlier connection — less the attempts that ended;
- a reservation ends exactly once, delivered (the slots it used are held) or returned (they
  are free again), also when its session closed meanwhile;
- the node's count in flight is the sum of every session's reserved and held slots (those of
  closed sessions' reservations included), and a reservation never takes it past the budget.

Pure bookkeeping: no I/O, no clock, no event loop; the dispatcher and the connections act on
what it answers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

Key = tuple[str, int]  # (task id, attempt)

MISSED_HEARTBEATS = 2  # heartbeats in a row that do not list an attempt before it is given up


class LedgerError(AssertionError):
    """An operation that would break the ledger's invariants: a bug in its caller."""


@dataclass(slots=True)
class Held:
    """An attempt a session holds: its queue ('' when it continues from an earlier connection
    and the queue is not known here), whether it was delivered to start eagerly, and how many
    heartbeats in a row did not list it."""

    queue: str
    eager: bool = False
    missed: int = 0


@dataclass(eq=False)
class Account:
    """One worker session's slots. Read it freely; change it only through the ledger."""

    session_id: str
    max_credits: int
    free: int
    capacity: int
    reserved: int = 0
    held: dict[Key, Held] = field(default_factory=dict)
    closed: bool = False


@dataclass(eq=False)
class Reservation:
    """Slots of one session taken for one claim (or one direct dispatch) until it ends."""

    account: Account
    slots: int
    ended: bool = False

    @property
    def session_id(self) -> str:
        return self.account.session_id


class LeaseLedger:
    def __init__(self, *, max_leases: int) -> None:
        if max_leases < 0:
            raise LedgerError("the lease budget cannot be negative")
        self.max_leases = max_leases
        self._accounts: dict[str, Account] = {}
        self._closing: set[Account] = set()  # closed, with reservations not yet ended
        self._inflight = 0  # reserved and held slots of every account, closing ones too
        self.on_freed: Callable[[], None] | None = None  # called when slots stop counting

    # -- sessions -----------------------------------------------------------------------------

    def open(self, session_id: str, *, capacity: int, max_credits: int) -> Account:
        """A session connected with ``capacity`` credits; later credits keep its free slots at
        most ``max_credits``."""
        if session_id in self._accounts:
            raise LedgerError(f"session {session_id} is open already")
        if capacity < 0 or max_credits < 0:
            raise LedgerError("credits cannot be negative")
        account = Account(session_id, max_credits, free=capacity, capacity=capacity)
        self._accounts[session_id] = account
        return account

    def close(self, account: Account) -> list[Key]:
        """The session's connection ended: the attempts it held no longer count here (their
        leases run out or move to another connection) and its free slots are gone. Its
        reservations in flight still end, each once, and are then forgotten. Closing twice
        does nothing."""
        if account.closed:
            return []
        self._own(account)
        ended = list(account.held)
        self._free_inflight(len(account.held))
        account.capacity -= len(account.held) + account.free
        account.held.clear()
        account.free = 0
        account.closed = True
        del self._accounts[account.session_id]
        if account.reserved:
            self._closing.add(account)
        return ended

    def grant(self, account: Account, n: int) -> int:
        """A ``credit`` frame: ``n`` more slots, free slots capped at ``max_credits``. Answers
        how many were added."""
        if n < 0:
            raise LedgerError("a credit cannot be negative")
        if account.closed:
            return 0
        added = max(0, min(n, account.max_credits - account.free))
        account.free += added
        account.capacity += added
        return added

    def adopt(self, account: Account, keys: Iterable[Key]) -> int:
        """Attempts that continue from an earlier connection (``hello.held``): held here from
        now on, outside the credits and the budget (they are leased already). Answers how
        many were new."""
        if account.closed:
            raise LedgerError("a closed session adopts nothing")
        added = 0
        for key in keys:
            if key not in account.held:
                account.held[key] = Held("")
                added += 1
        account.capacity += added
        self._inflight += added
        return added

    # -- reservations -------------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        """Slots of this node's sessions reserved or held."""
        return self._inflight

    @property
    def budget(self) -> int:
        """How many more slots a reservation may take on this node."""
        return max(0, self.max_leases - self._inflight)

    def reserve(self, account: Account, most: int) -> Reservation | None:
        """Take up to ``most`` of the session's free slots (and as many of the node's budget)
        for one claim or direct dispatch; None when none can be taken."""
        if most < 0:
            raise LedgerError("a reservation cannot be negative")
        if account.closed:
            return None
        self._own(account)
        slots = min(most, account.free, self.budget)
        if slots <= 0:
            return None
        account.free -= slots
        account.reserved += slots
        self._inflight += slots
        return Reservation(account, slots)

    def deliver(self, reservation: Reservation, attempts: Mapping[Key, Held]) -> bool:
        """End the reservation with these attempts leased under it: they are held, the slots
        they did not use are free again. False when the session closed meanwhile: then nothing
        is held, and the caller gives the leases back."""
        if len(attempts) > reservation.slots:
            raise LedgerError(
                f"{len(attempts)} attempts delivered for {reservation.slots} reserved slots"
            )
        account = reservation.account
        if not account.closed and any(key in account.held for key in attempts):
            raise LedgerError("an attempt delivered twice to one session")
        self._end(reservation)
        if account.closed:
            self._lapse(reservation)
            return False
        unused = reservation.slots - len(attempts)
        account.held.update(attempts)
        account.free += unused
        self._free_inflight(unused)
        return True

    def give_back(self, reservation: Reservation) -> None:
        """End the reservation unused: its slots are free again (gone if the session closed)."""
        self._end(reservation)
        account = reservation.account
        if account.closed:
            self._lapse(reservation)
            return
        account.free += reservation.slots
        self._free_inflight(reservation.slots)

    # -- attempts -----------------------------------------------------------------------------

    def settle(self, account: Account, key: Key) -> Held | None:
        """The attempt ended (reported, refused, released or given up): it no longer counts.
        Answers what was held, None if it was not (already settled, or the session closed)."""
        held = account.held.pop(key, None)
        if held is not None:
            account.capacity -= 1
            self._free_inflight(1)
        return held

    def unlisted(self, account: Account, listed: Collection[Key]) -> list[tuple[Key, Held]]:
        """A heartbeat listed every attempt the worker holds: those missing from
        ``MISSED_HEARTBEATS`` heartbeats in a row were given up by the worker (their leases ran
        out there) and are settled; answers them."""
        gone: list[tuple[Key, Held]] = []
        for key, held in account.held.items():
            if key in listed:
                held.missed = 0
                continue
            held.missed += 1
            if held.missed >= MISSED_HEARTBEATS:
                gone.append((key, held))
        for key, _ in gone:
            self.settle(account, key)
        return gone

    # -- checking -----------------------------------------------------------------------------

    def accounts(self) -> Iterator[Account]:
        yield from self._accounts.values()

    def check(self) -> None:
        """Raise ``LedgerError`` if an invariant does not hold (for tests; cheap enough to
        call anywhere, linear in the sessions)."""
        total = 0
        for account in [*self._accounts.values(), *self._closing]:
            if min(account.free, account.reserved, account.capacity) < 0:
                raise LedgerError(f"a negative count in {account}")
            if account.free + account.reserved + len(account.held) != account.capacity:
                raise LedgerError(f"free + reserved + held != capacity in {account}")
            if account.closed and (account.free or account.held):
                raise LedgerError(f"a closed session still counts slots: {account}")
            if account.closed and account not in self._closing:
                raise LedgerError(f"a closed session still open: {account}")
            total += account.reserved + len(account.held)
        if any(a.reserved == 0 for a in self._closing):
            raise LedgerError("a closed session without reservations is kept")
        if total != self._inflight:
            raise LedgerError(f"in flight {self._inflight}, counted {total}")

    # -- inside -------------------------------------------------------------------------------

    def _own(self, account: Account) -> None:
        if self._accounts.get(account.session_id) is not account:
            raise LedgerError(f"session {account.session_id} is not open in this ledger")

    def _free_inflight(self, count: int) -> None:
        self._inflight -= count
        if count and self.on_freed is not None:
            self.on_freed()

    @staticmethod
    def _end(reservation: Reservation) -> None:
        if reservation.ended:
            raise LedgerError("a reservation ended twice")
        reservation.ended = True
        reservation.account.reserved -= reservation.slots

    def _lapse(self, reservation: Reservation) -> None:
        """A closed session's reservation ended: its slots are gone with it."""
        account = reservation.account
        account.capacity -= reservation.slots
        self._free_inflight(reservation.slots)
        if account.reserved == 0:
            self._closing.discard(account)
