from setuptools import setup

setup(cffi_modules=["native/build.py:extcache_ffi", "native/build.py:nring_ffi",
                    "native/build.py:fitring_ffi",
                    "native/build.py:stubpath_ffi"])
