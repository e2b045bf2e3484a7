"""Pictures of what a policy does: attention on images and frames, boxes, token roles, curves.

Import the submodules directly (`from mmrlvr.viz.curves import plot_curves`); matplotlib is only
needed by the functions that draw.
"""
