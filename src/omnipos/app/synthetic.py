"""A fixed-seed synthetic clinical cohort (MEDS-style events) with daily and weekly rhythms. Extra ``[clinical]``.

Each patient has irregular visits: follow-ups a few days apart, routine visits weeks to months apart. Day workers
are seen on weekdays during clinic hours; shift workers (the label, about 30%) in the evening, any day of the
week. A visit writes a ``VISIT`` event, a glucose lab ten minutes later (with a value), and sometimes an HbA1c lab
(same time as the glucose) and a prescription (same time as the visit): duplicate times on purpose. Only the
time of day and the day of the week tell the two groups apart, which is what a periodic encoding should pick up.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["synthetic_cohort"]

_CODES = ("VISIT", "LAB//GLUCOSE", "LAB//HBA1C", "RX//METFORMIN")


def synthetic_cohort(n_patients: int = 100, *, seed: int = 0, start: str = "2020-01-06",
                     min_visits: int = 5, max_visits: int = 40) -> tuple[Any, Any]:
    """Return ``(events, labels)``: a MEDS-style DataFrame (``subject_id, time, code, numeric_value``, rows
    shuffled) and a Series ``shift_worker`` (bool) indexed by ``subject_id``. Same seed, same cohort."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("the synthetic cohort is a pandas DataFrame: pip install 'omnipos[clinical]'") from exc
    rng = np.random.default_rng(seed)
    shift = rng.random(n_patients) < 0.3
    visits = rng.integers(min_visits, max_visits + 1, n_patients)
    patient = np.repeat(np.arange(n_patients), visits)
    first = np.r_[True, patient[1:] != patient[:-1]]

    # days between visits: follow-ups (1-3 days) or routine visits (exponential, ~5 weeks); first visit in year 1
    gap = np.where(rng.random(patient.size) < 0.3, rng.integers(1, 4, patient.size),
                   np.ceil(rng.exponential(35.0, patient.size)))
    gap[first] = rng.integers(0, 365, first.sum())
    total = np.cumsum(gap)
    day = total - np.repeat(total[first] - gap[first], visits)
    weekday = day % 7                                   # start is a Monday: 5, 6 are the weekend
    day_worker = ~shift[patient]
    weekend = day_worker & (weekday >= 5)               # clinics close at weekends: moved to the next week
    day = day + np.where(weekend, 7 - weekday + rng.integers(0, 5, patient.size), 0)
    hour = np.where(day_worker, rng.normal(10.5, 1.5, patient.size).clip(7.5, 17.5),
                    rng.normal(21.0, 1.5, patient.size) % 24)
    minute = np.round(hour * 60 / 5) * 5                # times on a 5-minute grid, as charted
    visit_time = np.datetime64(start, "m") + (day * 1440 + minute).astype("timedelta64[m]")

    has_hba1c = rng.random(patient.size) < 0.3
    has_rx = rng.random(patient.size) < 0.3
    lab_time = visit_time + np.timedelta64(10, "m")
    glucose = rng.normal(105.0, 20.0, patient.size).round(1)
    hba1c = rng.normal(6.0, 0.8, patient.size).round(1)
    parts = [
        (patient, visit_time, "VISIT", np.full(patient.size, np.nan)),
        (patient, lab_time, "LAB//GLUCOSE", glucose),
        (patient[has_hba1c], lab_time[has_hba1c], "LAB//HBA1C", hba1c[has_hba1c]),
        (patient[has_rx], visit_time[has_rx], "RX//METFORMIN", np.full(has_rx.sum(), np.nan)),
    ]
    events = pd.DataFrame({
        "subject_id": np.concatenate([p for p, *_ in parts]) + 1000,
        "time": np.concatenate([t for _, t, *_ in parts]).astype("datetime64[ns]"),
        "code": np.concatenate([np.full(p.size, c, dtype=object) for p, _, c, _ in parts]),
        "numeric_value": np.concatenate([v for *_, v in parts]).astype(np.float32),
    })
    events = events.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    labels = pd.Series(shift, index=pd.Index(np.arange(n_patients) + 1000, name="subject_id"), name="shift_worker")
    return events, labels
