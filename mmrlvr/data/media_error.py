"""The one error every media decoder raises (images in `media`, videos in `video`).

It lives apart from both so that neither decoder module imports the other to get it."""


class MediaError(ValueError):
    """An image or video that cannot be decoded; the message names the file and the failure."""
