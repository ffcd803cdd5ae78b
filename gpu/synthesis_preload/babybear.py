"""The forkserver's preload where the field is babybear: its synthesis kernel."""

from gpu.babybear import BABYBEAR
from gpu.synthesis_preload import load

load(BABYBEAR)
