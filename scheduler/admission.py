"""Admission policy: what the engine may hold at once, by slots and by tokens."""

from __future__ import annotations

from scheduler.request import PriorityClass, Request, RequestKey

_BURST_PREFILLS = 4  # lower prompts prefilling at once in a burst while high traffic comes


class AdmissionController:
    """Admits while a slot is free and the running requests' worst-case tokens (prompt plus
    max_tokens, rounded up to the engine's KV block size) stay within the engine's KV budget, so
    an admitted request never runs the engine out of memory (an engine without a local budget,
    `token_budget` None, is counted by slots only). `paused` stops admissions without touching
    what is running.

    High first, yet work-conserving: a share of the limit (`high_reserve`, rounded down) is kept
    from low and medium requests only while a high request waits (`high_waiting`); with none
    waiting it is lent to them. High requests count only their own class against the limit, or
    against `high_slots` where their own traffic needs more (never past `high_cap`, where the
    fitted TPOT line reaches the objective, the set point on llama.cpp, or on vLLM 1.5 times the
    objective for a burst while their mean load is served on time), so an arriving high takes a
    lent slot back at once by running over the limit, and the lower classes wait until the total
    is back under it (the overshoot lasts one lower request's lifetime at most). Only the engine's
    own slots (`upper`) bound a high, so lower requests never fill the last `high_reserve` share of
    them. While a high request waits for its first token no lower one starts: a prompt
    prefilled in the same engine step would delay it. For the same reason at most
    `lower_prefills` lower requests prefill at once (None: any number) while `high_traffic` (a
    high request arrived within the last five minutes): where prompts prefill on the CPU threads
    that decode (llama.cpp), a high arriving beside several lower prompts waits for all of them.

    While `unbounded` (the engine alone would serve the present load on time) the running limit
    does not bind lower classes, only `burst_cap`, the engine's slots and the share kept for high
    do: the engine alone would have run them all. While highs come their prompts prefill
    `burst_prefills` at a time at most: bursts of four are rare below capacity, and in the first
    seconds of a step to 3x capacity on vLLM's CPU build a high prefilled beside eight lows' prompts
    took 1.2 s to its first token. Only `lower_prefills` at a time where prompts prefilled together
    take as long as one after another (`batched_prefill` False, llama.cpp): a burst gains nothing by
    them there, and a high arriving waits for all of them. What a burst starts past the limit is
    lent: it comes back if the load proves more than the engine serves on time (`past_limit`,
    scheduler/takeback.py).

    Background requests (batch lines) count against `background_slots`, which the scheduler sets
    from scheduler/background.py before it tries one, and prefill as lower requests do while
    interactive requests run."""

    def __init__(
        self,
        max_concurrency: int,
        token_budget: int | None,
        block_size: int = 1,
        high_reserve: float = 0.0,
        upper: int | None = None,
        lower_prefills: int | None = None,
    ) -> None:
        self.max_concurrency = max_concurrency
        self.high_reserve = high_reserve
        self.upper = upper or max_concurrency
        self.token_budget = token_budget
        self.block_size = block_size
        self.paused = False
        self.high_slots = 0
        self.high_busy = 0.0  # slots high traffic keeps busy on average
        self.high_cap: int | None = None  # where highs' TPOT reaches what they may take (None: no line yet)
        self._running: dict[RequestKey, int] = {}
        self._high: set[RequestKey] = set()
        self._high_prefilling: set[RequestKey] = set()
        self.lower_prefills = lower_prefills
        self.batched_prefill = True
        self.high_traffic = False
        self._lower_prefilling: set[RequestKey] = set()
        self.tokens_in_use = 0
        self.background_slots = 0
        self.unbounded = False  # the engine alone serves the present load on time: see scheduler/demand.py
        self.burst_cap = 0  # ...and runs this many at most meanwhile
        self._background: set[RequestKey] = set()

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def high_running(self) -> int:
        return len(self._high)

    @property
    def background_running(self) -> int:
        return len(self._background)

    @property
    def free_slots(self) -> int:
        return max(0, self.max_concurrency - len(self._running))

    def slots_for(self, priority: PriorityClass, high_waiting: bool = False) -> int:
        if priority is PriorityClass.HIGH:
            wanted = self.high_slots if self.high_cap is None else min(self.high_slots, self.high_cap)
            return min(self.upper, max(self.max_concurrency, wanted))
        kept = int(self.max_concurrency * self.high_reserve) if high_waiting else 0
        limit = max(self.max_concurrency, min(self.upper, self.burst_cap)) if self.unbounded else self.max_concurrency
        return max(1, min(limit - kept, self.upper - self._engine_reserve()))

    def high_fills_limit(self) -> bool:
        """Whether high traffic alone keeps the running limit busy, past the share kept for it:
        a lower request accepted now would only hold a slot high needs, so the door refuses it."""
        return self._fills_limit(self.high_busy)

    def held_for_high(self, high_waiting: bool) -> bool:
        """Whether lower requests wait for high ones: high traffic alone fills the limit and is here
        now (one waits, or highs hold half the limit), not only in the arrival rate's memory. Or the
        highs running fill it already: the rate takes seconds to see a step, and on vLLM's CPU
        build at 5x capacity lows started in them beside 16-19 highs, every high sent in those
        seconds then decoding past the TPOT objective."""
        here = high_waiting or len(self._high) >= self.max_concurrency / 2
        return here and (self.high_fills_limit() or self._fills_limit(len(self._high)))

    def _fills_limit(self, busy: float) -> bool:
        return busy > 0 and busy >= self.max_concurrency * (1 - self.high_reserve)

    def past_limit(self, request: Request) -> bool:
        """Whether a lower request starting now starts past the running limit: on a burst's slot,
        lent while the engine alone would serve the load on time (scheduler/takeback.py)."""
        return request.priority is not PriorityClass.HIGH and len(self._running) >= self.max_concurrency

    def high_needs_room(self, high: Request) -> bool:
        """Whether `high` waits only for a slot or memory that lower work holds: high is under its
        own share, but the engine's slots are full or its tokens would not fit; or high is at its
        share (`high_cap`) with lower requests running beside it, so it takes one's place and the
        batch keeps its size. At 5x capacity on llama.cpp, highs
        at their share of 3 were refused at the door while 2 lows accepted earlier decoded beside
        them."""
        if self.paused:
            return False
        if len(self._high) >= self.slots_for(PriorityClass.HIGH):
            return self.lower_running > 0
        full = len(self._running) >= self.upper
        return full or not self._tokens_fit(high)

    @property
    def lower_running(self) -> int:
        """Interactive medium and low requests in the engine (batch lines give way by themselves)."""
        return len(self._running) - len(self._high) - len(self._background)

    def fits_without(self, high: Request, running: Request) -> bool:
        """Whether `high` would start with `running`'s slot and memory given up."""
        tokens = self.tokens_in_use - self._running.get(running.key, 0) + self.cost(high)
        return len(self._running) - 1 < self.upper and (self.token_budget is None or tokens <= self.token_budget)

    def fits_in_place(self, high: Request) -> bool:
        """Whether `high` starts in the room a lower request just gave it up, past its own share."""
        return not self.paused and len(self._running) < self.upper and self._tokens_fit(high)

    def _tokens_fit(self, request: Request) -> bool:
        return self.token_budget is None or self.tokens_in_use + self.cost(request) <= self.token_budget

    def _engine_reserve(self) -> int:
        """Engine slots lower requests never fill, so a high can always start: the same share,
        rounded down (one of llama.cpp's 16; none of a `max_concurrency` of 2)."""
        return int(self.upper * self.high_reserve)

    def background_fill(self) -> int:
        """The engine's slots background work may fill while nothing else runs: all of them, since
        it gives them back the moment an interactive request comes (scheduler/background.py)."""
        return self.upper

    def _has_slot(self, priority: PriorityClass, high_waiting: bool) -> bool:
        if priority is PriorityClass.HIGH:
            return len(self._high) < self.slots_for(priority) and len(self._running) < self.upper
        return self._lower_may_prefill() and len(self._running) < self.slots_for(priority, high_waiting)

    @property
    def burst_prefills(self) -> int | None:
        """Lower prompts prefilling at once at most in a burst while highs come (None: any number)."""
        if self.lower_prefills is None or not self.batched_prefill:
            return self.lower_prefills
        return max(self.lower_prefills, _BURST_PREFILLS)

    def _lower_may_prefill(self) -> bool:
        if self._high_prefilling:
            return False
        bound = self.burst_prefills if self.unbounded else self.lower_prefills
        return bound is None or not self.high_traffic or len(self._lower_prefilling) < bound

    def _background_may_prefill(self) -> bool:
        """Alone in the engine, batch lines prefill all at once: an interactive arrival preempts the
        newest of them (scheduler/background.py). Bounded like lower prompts, a batch sent within
        half a minute of a high request ran 13 lines for 24 s on vLLM's CPU build, not 128."""
        return len(self._running) == len(self._background) or self._lower_may_prefill()

    def has_any_slot(self, high_waiting: bool = False) -> bool:
        """Whether a request of some class could start; when not, nobody need be picked."""
        if self.paused or len(self._running) >= self.upper:
            return False
        return self._has_slot(PriorityClass.HIGH, high_waiting) or self._has_slot(PriorityClass.LOW, high_waiting)

    def cost(self, request: Request) -> int:
        blocks = -(-request.cost_tokens // self.block_size)
        return blocks * self.block_size

    def can_ever_fit(self, request: Request) -> bool:
        return self.token_budget is None or self.cost(request) <= self.token_budget

    def fits(self, request: Request, high_waiting: bool = False) -> bool:
        slot = (
            (
                self._background_may_prefill()
                and len(self._background) < self.background_slots
                and len(self._running) < self.background_fill()
            )
            if request.background
            else (self._has_slot(request.priority, high_waiting))
        )
        return not self.paused and slot and self._tokens_fit(request)

    def admit(self, request: Request) -> None:
        cost = self.cost(request)
        self._running[request.key] = cost
        self.tokens_in_use += cost
        if request.priority is PriorityClass.HIGH:
            self._high.add(request.key)
            self._high_prefilling.add(request.key)
        elif self.lower_prefills is not None:
            self._lower_prefilling.add(request.key)
        if request.background:
            self._background.add(request.key)

    def first_token(self, key: RequestKey) -> bool:
        """Whether this ends a prefill that held lower requests back, so they may start now."""
        for prefilling in (self._high_prefilling, self._lower_prefilling):
            if key in prefilling:
                prefilling.discard(key)
                return True
        return False

    def release(self, key: RequestKey) -> None:
        self.tokens_in_use -= self._running.pop(key, 0)
        self._high.discard(key)
        self._high_prefilling.discard(key)
        self._lower_prefilling.discard(key)
        self._background.discard(key)
