"""The requeue daemon: bring failed training jobs back from their latest
complete checkpoint (journal, policy, checkpoint finder, daemon)."""
