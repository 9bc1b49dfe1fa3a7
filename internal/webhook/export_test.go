package webhook

// OnClaimQueued sets a function each delivery calls just before it joins a
// claim batch.
func OnClaimQueued(o *Options, f func()) { o.hooks.queued = f }

// OnClaimBatch sets a function each claim batch calls with its deliveries'
// event ids before it runs.
func OnClaimBatch(o *Options, f func(eventIDs []string)) { o.hooks.batch = f }
