"""The forkserver's preload where the field is goldilocks: its synthesis kernel."""

from gpu.goldilocks import GOLDILOCKS
from gpu.synthesis_preload import load

load(GOLDILOCKS)
