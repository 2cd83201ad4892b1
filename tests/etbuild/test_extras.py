"""A missing optional package names the extra that installs it."""

import pytest

from etbuild.errors import UsageError
from etbuild.extras import require


def test_a_missing_package_names_its_extra():
    with pytest.raises(UsageError) as err:
        require("etbuild_no_such_package.sub", "dask")
    assert str(err.value).startswith("this needs the Python package 'etbuild_no_such_package', which is not installed")
    assert str(err.value).endswith("install it with: pip install 'etbuild[dask]'")


def test_a_present_package_is_returned():
    assert require("json", "none").dumps([1]) == "[1]"
