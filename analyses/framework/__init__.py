"""What the analyses share: statistics, Markdown number formats, pre-registered predictions and claims, plots."""
