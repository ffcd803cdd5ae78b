"""`Section`: what every settings section shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A section of the settings (``PACER_<SECTION>__<FIELD>``): unknown fields refused,
    assignments checked, no infinite or NaN numbers."""

    # allow_inf_nan=False: "inf", "nan" and "1e400" are refused rather than turned into a
    # float that overflows a decision or an interval later.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)
