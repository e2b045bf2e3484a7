"""The recipe: the RL loop, one step, the run and its state, and the evaluation command; it calls
the methods' hooks (`mmrlvr.methods`) and names none of them."""
