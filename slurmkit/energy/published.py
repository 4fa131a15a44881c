"""Published grid figures, for replays and for a site that has no profile of its own yet.

Carbon intensity (gCO2e/kWh), the mean of each local hour of the day over
the whole year 2020, computed from the data set of the "Let's Wait Awhile"
study (P. Wiesner, I. Behnke, D. Scheinert, K. Gontarska, L. Thamsen,
"Let's Wait Awhile: How Temporal Workload Shifting Can Reduce Carbon
Emissions in the Cloud", Middleware 2021, doi:10.1145/3464298.3493399):
github.com/dos-group/lets-wait-awhile, commit 5e0d1553f5858337ac33ed30f6cf683cc5365116,
files data/gb_ci.csv, data/fr_ci.csv and data/ger_ci.csv (half-hourly, UTC,
from ENTSO-E Transparency Platform production data and IPCC life-cycle
factors per source).  Each value here is the mean of that year's points whose
UTC time falls in the local hour (Europe/London, Europe/Paris,
Europe/Berlin), rounded to the gram.  Yearly means: GB 214.8, FR 56.3,
DE 313.4.

Energy price (currency units per kWh): the 2020 average day-ahead price of
each market as RTE's "Bilan électrique 2020" (section "Market prices in
Europe") reports it: France 32.2 EUR/MWh, Germany 30.47, Great Britain
39.59.  A flat value: an hourly shape of these prices is not in the sources
above.

The emission cuts the study reports for its ML-training scenario (jobs
submitted on workdays 09:00-17:00, due at the start of the next workday, not
interruptible, forecasts with 5 % error; evaluation.ipynb of the same
commit): Germany 5.91 %, Great Britain 6.56 %, France 4.77 %, California
2.45 %: :data:`STUDY_CUT_NEXT_WORKDAY`.
"""

from typing import Dict, Tuple

from slurmkit.site.model import HourWindow

# Local hour 0..23 -> gCO2e/kWh (see the module docstring for the source and method).
CARBON_2020_HOURLY: Dict[str, Tuple[int, ...]] = {
    "GB": (185, 183, 180, 178, 178, 183, 200, 220, 227, 227, 220, 217,
           218, 219, 221, 226, 235, 246, 251, 251, 244, 233, 218, 196),
    "FR": (54, 53, 53, 51, 51, 53, 56, 57, 58, 58, 58, 59,
           59, 58, 58, 58, 57, 57, 58, 58, 57, 56, 57, 57),
    "DE": (319, 311, 306, 304, 308, 318, 330, 333, 326, 311, 295, 284,
           277, 276, 280, 289, 302, 318, 335, 345, 346, 342, 338, 330),
}
TIMEZONES = {"GB": "Europe/London", "FR": "Europe/Paris", "DE": "Europe/Berlin"}
# Per kWh (the EUR/MWh figures above / 1000).
DAY_AHEAD_PRICE_2020 = {"GB": 0.03959, "FR": 0.0322, "DE": 0.03047}
# The study's cut for non-interruptible jobs due the next workday, per region (fractions).
STUDY_CUT_NEXT_WORKDAY = {"DE": 0.0591, "GB": 0.0656, "FR": 0.0477, "CA": 0.0245}


def hourly_windows(values: Tuple[int, ...]) -> Tuple[HourWindow, ...]:
    """A 24-value day profile as the site's hour windows."""
    return tuple(HourWindow(hour, hour + 1, float(value)) for hour, value in enumerate(values))
