"""The CLI's commands that do more than run a pipeline once: ``check`` (hypothesis against torch) and ``bench``
(against torch eager and torch.compile on the GPU)."""
