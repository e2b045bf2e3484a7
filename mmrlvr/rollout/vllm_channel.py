"""The rollout server's end of the weight channel, inside vLLM's worker (`worker_extension_cls`).

vLLM mixes this class into its worker, and `LLM.collective_rpc(name, args)` calls its methods where
the model lives: in the server's process when vLLM runs in-process, in the engine's worker process
otherwise (the GPU default). So the broadcast lands straight on the device that holds the
weights, as TRL's `WeightSyncWorkerExtension` and verl's rollout workers receive theirs, and is
loaded through the worker's own `reload_weights` (which re-runs the loader's post-processing, as
`VLLMRolloutEngine.load_pairs` does). Method names carry an `mmrlvr_` prefix so they cannot shadow
the worker's own.
"""

from __future__ import annotations

from mmrlvr.rollout import weight_channel


class WeightChannelExtension:
    """Hosts the channel's store, joins the two-rank group, receives and loads a broadcast."""

    def mmrlvr_channel_store(self, host: str, timeout_s: float) -> int:
        """Host the rendezvous store on a free port of `host`; returns the port for the client."""
        self._mmrlvr_close()
        self._mmrlvr_store = weight_channel.host_store(host, timeout_s)
        return int(self._mmrlvr_store.port)

    def mmrlvr_channel_join(self, backend: str, timeout_s: float, host: str) -> None:
        """Join the group (blocks until the client joins too)."""
        store = getattr(self, "_mmrlvr_store", None)
        if store is None:
            raise ValueError("no weight channel is open: POST /weight_channel first")
        self._mmrlvr_group = weight_channel.open_group(store, weight_channel.SERVER_RANK, backend, timeout_s, host)

    def mmrlvr_channel_receive(self, spec: list) -> int:
        """Receive the tensors `spec` names and load them; returns how many were loaded."""
        group = getattr(self, "_mmrlvr_group", None)
        if group is None:
            raise ValueError("the weight channel is not joined: POST /weight_channel/join first")
        device = getattr(self, "device", "cpu")
        try:
            pairs = list(weight_channel.receive(group, spec, device=device))
        except Exception:
            self._mmrlvr_close()  # a broken broadcast leaves the group unusable: the client reopens it
            raise
        self.reload_weights(weights_iterator=iter(pairs))
        return len(pairs)

    def _mmrlvr_close(self) -> None:
        group = getattr(self, "_mmrlvr_group", None)
        if group is not None and hasattr(group, "abort"):
            try:
                group.abort()
            except Exception:  # noqa: BLE001 - best effort: the group is dropped either way
                pass
        self._mmrlvr_group = None
        self._mmrlvr_store = None
