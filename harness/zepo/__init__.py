"""ZEPO (Zhou et al., EMNLP 2024): search for a fairer judge instruction.

- `search`: the greedy, resumable search (Search, SearchSettings, objectives);
- `optimizers`: paraphrase generators (an OpenAI-compatible API model or a local model);
- `run`: a whole ZEPO run (search, then initial vs best on the evaluation documents);
- `study`: the instruction-sensitivity study (the paper's Figures 2-4);
- `plots`: those figures and the search plot.
"""
