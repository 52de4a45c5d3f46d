"""The application layer: the ``omnipos`` command line, the demo, plotting, the synthetic cohort, the read
featurizer and progress bars. It sits on top of everything (app -> scale -> domains -> core) and is the only
package that imports matplotlib or tqdm."""
