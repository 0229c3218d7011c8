"""`python -m harness.run ...`: the command-line name of harness.runtime.entry (Hydra's main)."""

from harness.runtime.entry import main

if __name__ == "__main__":
    main()
