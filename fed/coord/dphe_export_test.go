package coord

// OnDPHESum shows a test each DPHE round's decrypted sum.
func OnDPHESum(o *DPHEOptions, f func(round uint64, sum []float64)) { o.onSum = f }
